// `--trace FILE`: the spans of every rank's steps (StepResult.trace, core/step_trace.hpp) and each scheduler's steps,
// written as Chrome trace JSON (open it in Perfetto or chrome://tracing; bench/trace_overlap.py summarises it).
//
// Contract: the schedulers call add_* from their threads (a mutex serialises them); write() runs once, after the
// actors have stopped (Engine's destructor). Every rank is a process ("pid") named after it, its spans on thread 0;
// each scheduler is one more process with a span per step from its send to its last result. Times are the
// engine's machine's CLOCK_MONOTONIC in microseconds from the first span: ranks in other processes of this machine
// share it (StepResult.clockId, the machine's boot id, says so); a rank on another machine has its spans shifted
// by its clock's offset, estimated as NTP does from the step round trips that bracket its "step" spans (the
// engine's send and receive times around the worker's start and end), keeping the sample of the shortest round
// trip (its error is at most half of that round trip's time outside the step). Spans carry their step, layer and
// bytes as args; a scheduler's steps their shape (seqs, tokens, prefill_tokens, decode_tokens, attention_pairs),
// share_us and group.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comms/wire_msg.hpp"
#include "core/status.hpp"
#include "scheduler/step_shape.hpp"

namespace actord {

class TraceSink {
 public:
  explicit TraceSink(std::filesystem::path path) : path_(std::move(path)) {}
  const std::filesystem::path& path() const { return path_; }
  // The spans of one rank's StepResult of step `step_id` (none when it carries no trace), sent at sent_ns and
  // received at received_ns on this machine's clock (0: unknown; then it gives no clock sample). Throws on a
  // malformed message, as the step message decoders do.
  void add_result(const wire_msg& result, uint64_t step_id, uint64_t sent_ns = 0, uint64_t received_ns = 0);
  // A scheduler's step: sent at start_ns, every result in by end_ns (CLOCK_MONOTONIC), its shape (all lanes' slices)
  // and its share of the wall clock in microseconds (scheduler/step_clock.hpp): what `actord calibrate` fits.
  void add_scheduler_step(const std::string& scheduler, uint64_t step_id, uint64_t start_ns, uint64_t end_ns,
                          const StepShape& shape, uint64_t share_us);
  // The topology group whose replica `scheduler` serves: its steps carry it as the arg "group" (actord calibrate
  // --from-trace tells the groups' steps apart by it).
  void set_group(const std::string& scheduler, const std::string& group);
  size_t num_spans() const;
  Status write() const;

 private:
  struct Span {
    int pid = 0;
    std::string name, category;
    uint64_t start_ns = 0, dur_ns = 0, bytes = 0, step = 0;
    int64_t layer = -1;
    int tid = 0;  // the micro-batch
    StepShape shape;        // scheduler steps
    uint64_t share_us = 0;  // scheduler steps
  };
  int pid_of(const std::string& track);  // under mu_
  // A rank on another machine: its clock's offset from this one's (its time - ours) from the sample of the
  // shortest round trip so far.
  struct ClockSample {
    int64_t offset_ns = 0;
    uint64_t slack_ns = UINT64_MAX;  // the sample's round trip less the worker's step
  };
  std::map<int, ClockSample> clocks_;

  std::filesystem::path path_;
  mutable std::mutex mu_;
  std::map<std::string, int> pids_;
  std::map<int, std::string> groups_;  // a scheduler track's group
  std::vector<Span> spans_;
};

}  // namespace actord
