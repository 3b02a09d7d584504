// A step's greedy picks kept in device memory for the step after, and their host copies delivered when the host asks
// (the CUDA backend's side of Backend::defer_reads / complete_reads: the host queues step N + 1 before it reads
// step N's tokens, and step N + 1's embedding takes them from here on the device).
//
// Contract: one stream; at most two steps' picks at a time (the one whose host copies are awaited and the one being
// queued), each in its own slot, so the step being queued never overwrites the rows the one before left for it.
// begin() starts a step (its ticket), next_rows() gives the device room for a row_bests launch's rows (appended:
// a forward pass in pieces calls it once per piece) or for a sample_rows launch's tokens (as the ids of its rows),
// queue_copy() queues their copy into pinned memory and an event after it. complete(ticket) waits for that event
// only and writes the host outputs (the picks, or the tokens they carry). Not thread-safe (the backend's).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "executors/row_best.hpp"
#include "executors/sampler.hpp"

namespace actord::cuda {

class DeferredPicks {
 public:
  explicit DeferredPicks(cudaStream_t stream);
  ~DeferredPicks();
  DeferredPicks(const DeferredPicks&) = delete;
  DeferredPicks& operator=(const DeferredPicks&) = delete;

  uint64_t begin();                      // a new step's picks; its ticket (1, 2, ...)
  bool active() const;                   // a step begun and not completed: row_bests append here
  RowBest* next_rows(int rows);          // device room for the current step's next `rows` picks
  void queue_copy(std::span<RowBest> out);  // the rows of the last next_rows(), to `out` at complete()
  void queue_copy(std::span<SampledToken> out);  // the same rows' ids as tokens (drawn, no logprobs)
  // The picks of the step before the current one (what previous_pick(k) tokens name); null when there is none.
  const RowBest* previous() const;
  int previous_rows() const;
  bool done(uint64_t ticket) const;      // complete(ticket) would not wait
  void complete(uint64_t ticket);        // waits for the ticket's copies and writes its host outputs

 private:
  struct Slot {
    uint64_t ticket = 0;
    bool completed = true;
    std::shared_ptr<void> rows;          // device: the step's picks, appended
    size_t rows_capacity = 0;            // RowBest entries
    int count = 0;                       // picks so far
    RowBest* pinned = nullptr;           // host staging of the copies
    size_t pinned_capacity = 0;
    size_t pinned_used = 0;
    std::vector<RowBest*> retired;       // staging outgrown in this step, freed once its copies are delivered
    struct Copy {
      std::span<RowBest> out;            // one of the two
      std::span<SampledToken> tokens;
      const RowBest* staged = nullptr;   // where it lands (pinned)
    };
    std::vector<Copy> copies;
    int last_rows = 0;                   // of the last next_rows()
    cudaEvent_t event = nullptr;         // after the last queued copy
  };
  Slot& slot_of(uint64_t ticket) { return slots_[ticket & 1]; }
  const Slot& slot_of(uint64_t ticket) const { return slots_[ticket & 1]; }
  void queue(Slot::Copy copy, size_t room);  // the last next_rows()' rows to pinned staging, for `copy`'s output
  void deliver(Slot& s);                 // pinned -> host outputs (the copies must have landed)
  static constexpr size_t kMinPinnedRows = 256;

  cudaStream_t stream_;
  Slot slots_[2];
  uint64_t ticket_ = 0;                  // the latest begun
};

}  // namespace actord::cuda
