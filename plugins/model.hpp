// The interface every model plugin implements, and the batch it runs.
//
// Contract: a Model is created once per worker (it owns its weights) and called from one thread at a time (the
// worker actor's). forward() runs the tokens of one step for several sequences at once, writes their K/V into the
// paged cache, and returns logits only for the rows the caller asks for. CAF-free.
#pragma once

#include <cstdint>
#include <vector>

#include "plugins/model_config.hpp"

namespace actord {

class KvCache;
namespace cpu {
class ThreadPool;
}

// One sequence's part of a step.
struct SeqSlice {
  int32_t first_token = 0;            // index of its first token in ForwardBatch::tokens
  int32_t num_tokens = 0;
  int32_t start_pos = 0;              // position of its first token
  const uint32_t* block_table = nullptr;  // [ceil((start_pos + num_tokens) / block_size)] KV block ids
  bool want_logits = false;           // logits for its last token go to the output
  bool all_logits = false;            // logits for every one of its tokens go to the output (prompt logprobs)
};

struct ForwardBatch {
  std::vector<int32_t> tokens;        // [n_tokens] token ids, sequences back to back
  std::vector<SeqSlice> seqs;         // [n_seqs]
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // logits: [rows, vocab_size]: per slice in the order of batch.seqs, num_tokens rows (its tokens in order) with
  // all_logits, else one row (its last token) with want_logits, else none. The pool runs the parallel parts.
  virtual void forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits, cpu::ThreadPool& pool) = 0;
};

}  // namespace actord
