// Whole microseconds from one steady-clock time to a later one: 0 when `to` is not after `from`.
#pragma once

#include <chrono>
#include <cstdint>

namespace actord {

inline uint64_t micros_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  if (to <= from) return 0;
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(to - from).count());
}

}  // namespace actord
