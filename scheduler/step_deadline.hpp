// How long a scheduler waits for a step's result before it declares its worker failed (a stopped, frozen or
// starved worker would otherwise hang every request forever).
//
// Contract: pure, one scheduler's. observe() learns the worker's compute time from each result: per step for
// decode-only steps, per prompt token for steps with prefill (the step's whole time over its prompt tokens: an
// over-estimate, on the safe side). deadline() of a step = 2 x (the expected compute of the steps queued at the
// worker ahead of it + its own) + `slack` (engine.step_timeout). Until a step of the kind needed has been observed
// there is no deadline (nullopt): a worker process is then still watched by its heartbeat.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace actord {

class StepDeadline {
 public:
  explicit StepDeadline(std::chrono::milliseconds slack) : slack_(slack) {}

  void observe(uint32_t prefill_tokens, uint32_t decode_tokens, uint64_t compute_us);
  // Expected compute of a step of these tokens, in microseconds; nullopt while unknown.
  std::optional<uint64_t> expected_us(uint32_t prefill_tokens, uint32_t decode_tokens) const;
  // The wait for a step whose own expected compute is `own_us`, behind `ahead_us` of expected compute; nullopt
  // when either is unknown.
  std::optional<std::chrono::milliseconds> deadline(std::optional<uint64_t> ahead_us,
                                                    std::optional<uint64_t> own_us) const;
  std::chrono::milliseconds slack() const { return slack_; }

 private:
  std::chrono::milliseconds slack_;
  double decode_step_us_ = -1;        // moving average per decode-only step; < 0: none seen
  double prefill_token_us_ = -1;      // moving average per prompt token of steps with prefill; < 0: none seen
};

}  // namespace actord
