#include "scheduler/step_deadline.hpp"

#include <algorithm>
#include <cmath>

namespace actord {
namespace {

// A moving average that follows a slower worker at once and a faster one gradually, so that a deadline lags
// behind a slowdown as little as possible.
void follow(double& avg, double x) {
  avg = avg < 0 || x > avg ? x : 0.8 * avg + 0.2 * x;
}

}  // namespace

void StepDeadline::observe(uint32_t prefill_tokens, uint32_t decode_tokens, uint64_t compute_us) {
  if (prefill_tokens > 0) {
    follow(prefill_token_us_, double(compute_us) / prefill_tokens);
  } else if (decode_tokens > 0) {
    follow(decode_step_us_, double(compute_us));
  }
}

std::optional<uint64_t> StepDeadline::expected_us(uint32_t prefill_tokens, uint32_t decode_tokens) const {
  if (prefill_tokens > 0) {
    if (prefill_token_us_ < 0) return std::nullopt;
    return static_cast<uint64_t>(std::ceil(prefill_token_us_ * prefill_tokens));
  }
  if (decode_tokens == 0) return 0;  // a step of block copies only
  if (decode_step_us_ < 0) return std::nullopt;
  return static_cast<uint64_t>(std::ceil(decode_step_us_));
}

std::optional<std::chrono::milliseconds> StepDeadline::deadline(std::optional<uint64_t> ahead_us,
                                                                std::optional<uint64_t> own_us) const {
  if (!ahead_us || !own_us) return std::nullopt;
  const uint64_t expected_ms = (2 * (*ahead_us + *own_us) + 999) / 1000;
  return slack_ + std::chrono::milliseconds(expected_ms);
}

}  // namespace actord
