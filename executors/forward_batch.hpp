// One step's batch as a forward pass runs it: token ids, sequences back to back, each with its positions and its
// KV block table. Plain data: what the scheduler's ExecuteStep becomes in the worker, and what every backend's
// kernels read.
#pragma once

#include <cstdint>
#include <vector>

namespace actord {

// One sequence's part of a step.
struct SeqSlice {
  int32_t first_token = 0;            // index of its first token in ForwardBatch::tokens
  int32_t num_tokens = 0;
  int32_t start_pos = 0;              // position of its first token
  const uint32_t* block_table = nullptr;  // [ceil((start_pos + num_tokens) / block_size)] KV block ids
  // Logits for its last logit_rows tokens go to the output: 1 for the next token's, 1 + drafts to verify draft
  // tokens (speculative decoding), num_tokens for every position's (prompt logprobs), 0 for none.
  int32_t logit_rows = 0;
  int32_t lora = 0;                   // 0: the base model; k: the model's k-th LoRA adapter (ModelLoadOptions::lora)
};

// A token not known on the host yet: row k of the picks of the step before, still in the device's memory
// (Backend::runs_ahead); only the embedding reads it, and resolves it where it runs.
constexpr int32_t previous_pick(uint32_t k) { return -1 - static_cast<int32_t>(k); }
constexpr bool is_previous_pick(int32_t token) { return token < 0; }
constexpr uint32_t previous_pick_row(int32_t token) { return static_cast<uint32_t>(-1 - token); }

struct ForwardBatch {
  std::vector<int32_t> tokens;        // [n_tokens] token ids (or previous_pick(k)), sequences back to back
  std::vector<SeqSlice> seqs;         // [n_seqs]
};

}  // namespace actord
