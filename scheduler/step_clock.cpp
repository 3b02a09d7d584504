#include "scheduler/step_clock.hpp"

#include <algorithm>

#include "core/elapsed.hpp"

namespace actord {

uint64_t StepClock::book(time_point sent, time_point arrived, uint64_t answered_late_us) {
  const time_point from = std::max(sent, last_end_);
  const uint64_t share = micros_between(from, arrived) - std::min(answered_late_us, micros_between(from, arrived));
  last_end_ = from + std::chrono::microseconds(share);
  return share;
}

}  // namespace actord
