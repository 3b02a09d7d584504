// Two-batch overlap only where it pays (groups[].tbo: auto): a step split in micro-batches hides one micro-batch's
// communication behind another's compute, but every micro-batch reads the weights again. A memory-bound step (few
// tokens per weight read, as CPU decode of a small batch, or MoE experts that each get a few tokens) can lose more to
// the second read than the communication it hides; a compute-bound one gains. Which it is depends on the model, the
// batch, the machine and the link, so the chooser learns it from the steps' own times.
//
// Contract: pure (no clock, no I/O), deterministic. Steps are bucketed by their tokens (1, 2-3, 4-7, ... powers of
// two); per bucket and mode (split or whole) it keeps an exponential average of the step's time per token (the
// newest weighs kNewest). choose_split(tokens): until each mode of the bucket was chosen kWarmup times and observed
// once, the one chosen fewer times (split first); then the mode with the lower average, except that every kProbeEvery-th choice of
// the bucket takes the other one, so that a change (longer contexts, another load on the machine) is noticed.
// observe() records a finished step's time under the mode it ran in (steps in flight finish after later choices).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace actord {

class OverlapChooser {
 public:
  static constexpr int kWarmup = 3;
  static constexpr uint64_t kProbeEvery = 16;
  static constexpr double kNewest = 0.25;

  bool choose_split(int64_t tokens);
  void observe(int64_t tokens, bool split, uint64_t micros);
  // The average microseconds per token of a mode for steps of `tokens`' bucket; 0 before any sample.
  double per_token_us(int64_t tokens, bool split) const;

 private:
  struct Mode {
    double per_token_us = 0;
    int samples = 0;  // observed
    int chosen = 0;
  };
  struct Bucket {
    Mode whole, split;
    uint64_t choices = 0;
  };
  static std::size_t bucket_of(int64_t tokens);
  std::array<Bucket, 40> buckets_{};
};

}  // namespace actord
