// Token sampling from rows of logits, per request: a response format's allowed ids, logit biases, penalties,
// min_tokens masking, greedy or temperature, min-p,
// top-k, top-p, a seeded draw, and logprobs (see core/sampling_options.hpp for each option's rule and the order).
//
// Contract: deterministic. The random draw is keyed by (seed, sample_index), the number of tokens the sequence had
// generated before, so a seeded request gives the same tokens whatever it was batched with, and after a preemption
// and recompute. Greedy (temperature 0) picks the highest logit after penalties and masking, the lowest id on ties.
// Options are validated before they get here (SamplingOptions::validate); a Sampler never fails. Draws equal the
// previous sampler's (same key, order and arithmetic) but where the total, now summed in another order, moves r across
// a boundary: about 1e-15 of draws. Logits are expected finite or -inf (NaN: some token, no crash).
// Cost: no sort of the vocabulary (the old sampler sorted it for every draw: ~15 ms a row at vocab 150k).
// Greedy: one vector pass. A draw without top-k: a max pass, a vector pass of double exp() for the total weight
// (4 doubles wide where the CPU has AVX2, chosen at run time), then the head of the distribution gathered in bands,
// each a pass that skips blocks below its floor (a bound from the total guarantees the third band reaches the mass
// the walk needs; the first two are guesses that usually suffice), and only as much of the head sorted as the walk
// reaches (chunks of 64, 256, ... picked with nth_element). top-k: one selection pass (blocks that cannot enter
// are skipped), then a sort of the k. Logprobs add a max pass, an exp pass and a top-N selection over the raw row.
// Tokens, totals and logprobs do not depend on the CPU a binary runs on. sample_rows spreads rows over the pool.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/sampling_options.hpp"
#include "executors/draw_random.hpp"
#include "executors/row_best.hpp"

namespace actord {

namespace cpu {
class ThreadPool;
}

// The token history the penalties need, for one sequence: kept by the worker across its steps.
class PenaltyHistory {
 public:
  void add_prompt(std::span<const int32_t> ids);  // tokens of the prompt (they count for the repetition penalty only)
  void add_output(int32_t id);                    // one generated token (counts for all three penalties)
  void clear();

  // Distinct token ids seen in the prompt or the output.
  const std::vector<int32_t>& seen() const { return seen_; }
  // Generated token id -> how many times it was generated.
  const std::unordered_map<int32_t, uint32_t>& output_counts() const { return output_counts_; }

 private:
  void mark_seen(int32_t id);
  std::vector<int32_t> seen_;
  std::unordered_map<int32_t, bool> seen_set_;
  std::unordered_map<int32_t, uint32_t> output_counts_;
};

// One row's sampling job.
struct SampleRequest {
  const SamplingOptions* options = nullptr;
  uint32_t sample_index = 0;                // tokens the sequence generated before this one
  const PenaltyHistory* history = nullptr;  // null: no penalties applied
  std::span<const int32_t> masked_ids;      // ids that must not be sampled (stop ids before min_tokens); may be empty
  // A response format's grammar (structured/token_mask.hpp): bit id % 64 of word id / 64 set for each id it allows,
  // the others masked before anything else; empty: every id.
  std::span<const uint64_t> allowed;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                         // raw log-softmax of `token`, when options->logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;   // the options->logprobs best raw (id, logprob), best first
};

class Sampler {
 public:
  // logits: [vocab_size]; penalties and masks are applied in place (temperature is not: logits / temperature is
  // computed where it is needed).
  SampledToken sample(float* logits, int vocab_size, const SampleRequest& request);
  // Convenience for tests and simple callers: no penalties, no mask, no logprobs; logits left untouched.
  int32_t sample(const float* logits, int vocab_size, const SamplingOptions& options, uint32_t sample_index);
  // The raw log-softmax of `token` in a row, and the top_n best (prompt logprobs); the row is left untouched.
  TokenLogprobs logprobs_of(const float* logits, int vocab_size, int32_t token, int top_n);

 private:
  // Greedy or the seeded draw over logits after penalties and masks; logits untouched.
  int32_t choose(const float* logits, int vocab_size, const SamplingOptions& options, uint32_t sample_index);

  std::vector<std::pair<float, int32_t>> candidates_;   // scratch: (logit, id) of the head or the top-k / top-N
  std::vector<double> probs_;                           // scratch: weights of the candidates sorted so far
  std::vector<std::pair<int32_t, float>> raw_saved_;    // scratch: (id, raw logit) of tokens changed in place
};

// Samples every row: logits [rows, vocab_size] (modified in place), requests/out [rows]. Rows are spread over the
// pool's threads (one Sampler each, owned by this object).
class BatchSampler {
 public:
  void sample_rows(float* logits, int vocab_size, std::span<const SampleRequest> requests,
                   std::span<SampledToken> out, cpu::ThreadPool& pool);

 private:
  std::vector<Sampler> samplers_;  // [pool.size()]
};

// Whether a row sampled with `options` is the argmax of its raw logits: greedy (temperature 0 or top_k 1) without a
// response format, logit biases, penalties, logprobs or ids masked (`masked`: stop ids before min_tokens). Then each
// vocabulary shard's best decides it: tensor parallel ranks exchange their best (RowBest) instead of their logits.
bool takes_raw_argmax(const SamplingOptions& options, bool masked);

// Over ids first .. first + n - 1 of row (row[0] is id first): NaN ignored, as the greedy sampler does.
RowBest row_best(const float* row, int n, int32_t first);
// The greedy token of whole rows from the best of each shard: bests [shards][rows] (shards in vocabulary order);
// the highest logit, on ties the lowest id: what the greedy sampler picks from the whole row.
void merge_row_bests(std::span<const RowBest> bests, int shards, int rows, std::span<int32_t> tokens);

}  // namespace actord
