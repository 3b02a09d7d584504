// What a rank did during one step, for `--trace` (Chrome trace JSON): named spans on the machine's monotonic clock,
// recorded by whoever does the work (the worker: its step, idle time and sampling; the model: attention, MLP or
// experts per layer; a communicator: each collective with its bytes) and shipped in the step's result.
//
// Contract: a StepTrace is filled by one thread (its rank's); names and categories are string literals (only their
// pointers are kept). A null StepTrace* means tracing is off: TraceScope then costs one branch.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace actord {

struct TraceSpan {
  const char* name = "";
  const char* category = "";  // compute | comm | sample | idle | step
  uint64_t start_ns = 0;      // CLOCK_MONOTONIC
  uint64_t dur_ns = 0;
  uint64_t bytes = 0;         // comm: the bytes the operation moved for this rank
  int layer = -1;             // the model layer it belongs to; -1: none
  int micro_batch = 0;        // two-batch overlap: 0 .. micro-batches - 1
};

class StepTrace {
 public:
  static uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  }
  // A steady_clock time point on now_ns()'s scale (libstdc++'s steady_clock is CLOCK_MONOTONIC).
  static uint64_t ns_of(std::chrono::steady_clock::time_point t) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  }
  void add(const char* name, const char* category, uint64_t start_ns, uint64_t end_ns, uint64_t bytes = 0) {
    spans_.push_back({name, category, start_ns, end_ns > start_ns ? end_ns - start_ns : 0, bytes, layer});
  }
  void add(const TraceSpan& span) { spans_.push_back(span); }
  // Which CLOCK_MONOTONIC now_ns() reads: this machine's boot id (/proc/sys/kernel/random/boot_id), the same for
  // every process of one machine and boot.
  static const std::string& clock_id();
  const std::vector<TraceSpan>& spans() const { return spans_; }
  void clear() {
    spans_.clear();
    layer = -1;
  }
  int layer = -1;  // spans added now belong to this layer (the model sets it)

 private:
  std::vector<TraceSpan> spans_;
};

// A span from construction to destruction, when `trace` is set.
class TraceScope {
 public:
  TraceScope(StepTrace* trace, const char* name, const char* category)
      : trace_(trace), name_(name), category_(category), start_(trace ? StepTrace::now_ns() : 0) {}
  ~TraceScope() {
    if (trace_) trace_->add(name_, category_, start_, StepTrace::now_ns());
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  StepTrace* trace_;
  const char* name_;
  const char* category_;
  uint64_t start_;
};

}  // namespace actord
