// Token sampling from one row of logits: greedy, temperature, top-k, top-p.
//
// Contract: deterministic. The random draw is keyed by (seed, sample_index), the number of tokens the sequence had
// generated before, so a seeded request gives the same tokens whatever it was batched with, and after a preemption
// and recompute. Greedy (temperature 0) picks the highest logit, the lowest id on ties.
#pragma once

#include <cstdint>
#include <vector>

namespace actord {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  int32_t sample(const float* logits, int vocab_size, const SamplingOptions& options, uint32_t sample_index);

 private:
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

// A uniform double in [0, 1) from a 64-bit key (splitmix64).
double uniform_from_key(uint64_t key);

}  // namespace actord
