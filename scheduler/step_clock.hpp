// StepClock: each step's share of the wall clock, for the prefill and decode throughput a scheduler reports.
//
// Steps overlap in flight (the next is sent before the last result comes back), so a step is booked from when it
// was sent or the previous step ended, whichever is later, to its own end: shares never overlap and add up to the
// time the worker was busy or waited for steps. A step's end is when its result came back, less how long the worker
// held the result after the step was done (StepResult.answeredLateMicros: a step that ran ahead is answered once
// the next step is queued behind it, which may be a whole step later). Ends are kept in order: a step never ends
// before the one before it, nor before it was sent.
//
// Pure: the caller gives every time (steady clock); nothing here reads a clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace actord {

class StepClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  // The oldest step in flight, sent at `sent`, whose result arrived at `arrived`, held `answered_late_us` by the
  // worker: its share in microseconds. Its end becomes the previous step's end.
  uint64_t book(time_point sent, time_point arrived, uint64_t answered_late_us);
  time_point last_end() const { return last_end_; }

 private:
  time_point last_end_{};
};

}  // namespace actord
