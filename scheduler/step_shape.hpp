// What a step asks of a replica's compute, in the terms a step cost model prices (sim/step_cost_model.hpp): prompt
// tokens, decode tokens and the attention work of every query row. The scheduler actor records it with each step
// of a --trace, the simulator prices the steps it plans with it.
//
// Contract: pure. attention_pairs counts, over every row the step feeds, the KV positions that row attends (its own
// included): a slice of n tokens from position p adds n * p + n (n + 1) / 2.
#pragma once

#include <cstdint>

#include "scheduler/batch_scheduler.hpp"

namespace actord {

struct StepShape {
  uint64_t prefill_tokens = 0;
  uint64_t decode_tokens = 0;  // decode rows, drafts included
  uint64_t attention_pairs = 0;
  uint64_t sequences = 0;
  uint64_t tokens() const { return prefill_tokens + decode_tokens; }
  StepShape& operator+=(const StepShape& o) {
    prefill_tokens += o.prefill_tokens;
    decode_tokens += o.decode_tokens;
    attention_pairs += o.attention_pairs;
    sequences += o.sequences;
    return *this;
  }
};

inline StepShape shape_of(const StepPlan& plan) {
  StepShape shape;
  shape.prefill_tokens = static_cast<uint64_t>(plan.num_prefill_tokens);
  shape.decode_tokens = static_cast<uint64_t>(plan.num_tokens - plan.num_prefill_tokens);
  shape.sequences = plan.slices.size();
  for (const PlannedSlice& s : plan.slices) {
    const uint64_t n = static_cast<uint64_t>(s.num_tokens), p = static_cast<uint64_t>(s.start_pos);
    shape.attention_pairs += n * p + n * (n + 1) / 2;
  }
  return shape;
}

}  // namespace actord
