// What a worker does, without the actor around it: load a model shard and its KV memory (WorkerInit), then
// execute steps (ExecuteStep -> StepResult). The same code serves a worker actor in the engine's process and one
// in a worker process behind ZeroMQ.
//
// Contract: not thread-safe (one worker actor owns it). Steps arrive in the order the scheduler planned them.
// The worker keeps per-sequence state between steps: the sampling options and the whole block table (sent with a
// sequence's first slice; later slices bring only the blocks added), the token history its penalties need, and the tokens the previous step sampled, which a slice planned
// ahead of that step's result asks for (SeqStep.fromPrevious). A step whose previous step failed cannot resolve
// those and fails too. Never throws on bad input: a failed init or a malformed step comes back as a WorkerReady /
// StepResult carrying an Error.
//
// Ranks of a tensor x pipeline parallel replica (WorkerInit's tp, pp, tpRank, ppRank): every rank receives every
// ExecuteStep and keeps the same per-sequence state, makes the same block copies in its own KV shard and runs its
// shard of the forward pass in lockstep with the others (plugins/model.hpp). One rank, the driver (tp rank 0 of the
// last stage, where the logits are), samples and answers with the StepResult the scheduler waits for; the others
// (followers) answer with an empty one nobody reads. Tokens a slice takes from the previous step's samples reach
// the first stage from the driver through the pipeline group (and its TP group) before the forward pass; the
// driver sends -1 for one it cannot resolve, and every rank then fails the step alike.
#pragma once

#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/overlap_runner.hpp"
#include "actors/rank_links.hpp"
#include "core/step_trace.hpp"
#include "comms/wire_msg.hpp"
#include "executors/backend.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "memory/kv_relayout.hpp"
#include "plugins/model_registry.hpp"
#include "structured/compile_check.hpp"
#include "structured/output_matcher.hpp"
#include "structured/token_mask.hpp"

namespace actord {

class WorkerCore {
 public:
  // Takes a copy of the registry: plugins named in WorkerInit are added to the copy. `links`: the communicators of a
  // rank that is a thread of the engine (a rank in its own process joins the groups WorkerInit names).
  explicit WorkerCore(ModelRegistry registry, RankLinks links = {})
      : registry_(std::move(registry)), links_(std::move(links)) {}
  ~WorkerCore();  // with ACTORD_CUDA_REPORT set: how its steps ran ahead (stderr)

  wire_msg init(const wire_msg& worker_init);     // WorkerInit -> WorkerReady
  // ExecuteStep -> StepResult, in the order the scheduler planned them. A step may run ahead: on a backend that
  // runs_ahead(), a lone rank (no TP, PP, EP or AFD, no two-batch overlap, no trace, a dense model) whose step
  // only takes greedy tokens, or draws its backend takes whole (Backend::samples_ahead), queues its forward pass on
  // the device and leaves the step pending; the next step, when
  // it can run ahead too, is queued behind it with the pending step's tokens taken on the device (previous_pick), and
  // only then is the pending step's result read. So the device never waits for the host between decode steps. `done`
  // gets the results this call completed, oldest first (none, this step's, or the pending one's and this one's).
  void step(const wire_msg& execute_step, std::vector<wire_msg>& done);
  bool has_pending() const { return pending_.has_value(); }
  bool pending_done();                             // finish_pending() would not wait for the device (noted when)
  // For a caller waiting for either the pending step or its next message: gives the core up briefly (a yield while
  // the step is young, then 20 us sleeps: a GPU worker need not burn its CPU while the device works).
  void pause_while_pending() const;
  wire_msg finish_pending();                       // the pending step's StepResult (waits for its device work)
  wire_msg execute(const wire_msg& execute_step);  // one step, its result, nothing pending before or after

  // A held sequence's KV blocks as one message: ExportKv -> KvExport with the bytes of its first
  // ceil(numTokens / block_size) blocks of this rank's shard (its stage's layers, its KV heads; the layout says
  // which) in bulk[0]. The sequence keeps running here (the caller releases it).
  // (The caller finishes a pending step first.)
  wire_msg export_kv(const wire_msg& export_request);
  // ImportKv (its export's bytes in bulk[0]) -> KvImported: writes the blocks into this worker's pool at the ids
  // the caller (the scheduler that owns them) chose, this rank's layers and heads taken from an export that holds
  // them (its own shard's, or the whole model's gathered from another shape's ranks: memory/kv_relayout.hpp);
  // nothing is written when it does not. A step that names the sequence as new, starting at the export's numTokens
  // over these blocks, continues it.
  wire_msg import_kv(const wire_msg& import_request);

  const std::string& name() const { return name_; }
  KvShard kv_shard() const;  // the part of the whole model's KV this rank holds (after init)
  // The rank that samples for its lane (an FFN rank of AFD samples nothing).
  bool driver() const { return !place_.ffn() && is_driver(place_.tp_rank, place_.pp_rank, place_.pp); }
  size_t num_sequences() const { return seqs_.size(); }  // sequences the worker holds state for

 private:
  // A step left pending: what its result needs once its picks are on the host.
  struct PendingStep {
    uint64_t ticket = 0;                 // Backend::defer_reads
    uint64_t correlation_id = 0, step_id = 0;
    std::chrono::steady_clock::time_point start;
    // When the worker first saw its device work done (reads_done), if before it was answered: the step's end, for
    // its compute time and StepResult.answeredLateMicros.
    std::optional<std::chrono::steady_clock::time_point> done_at;
    uint64_t idle_us = 0;
    std::vector<RowBest> bests;          // [rows] written by complete_reads: greedy picks,
    std::vector<SampledToken> draws;     // or the tokens the backend drew
    std::vector<uint64_t> seq_ids;       // whose token each row is
    bool decode_only = false;            // one token per sequence (for ACTORD_CUDA_REPORT)
  };
  // The step's launch: its result, or none when it was left pending (after `done` got the older pending one's).
  std::optional<wire_msg> launch(const wire_msg& execute_step, std::vector<wire_msg>& done);
  wire_msg finish(PendingStep& step);
  // Whether this step, which samples some rows, may run ahead (see step()) and how: its greedy picks (argmax_only:
  // every row it samples is its logits' argmax), or tokens its backend draws (Backend::samples_ahead of the driver's
  // sample_requests_).
  enum class RunAhead { no, picks, draws };
  template <class Step, class Seqs>
  RunAhead may_run_ahead(const Step& step, const Seqs& seqs, bool argmax_only, size_t sampled_rows);
  std::optional<PendingStep> pending_;
  struct AheadCounts {  // kept only with ACTORD_CUDA_REPORT set (read at init)
    bool on = false;
    uint64_t steps = 0, deferred = 0, behind_pending = 0;
    double walk_ms = 0, wait_ms = 0;  // launch() to the forward pass queued; complete_reads()
    std::vector<double> decode_walk_ms, decode_wait_ms;  // the same, of each step of one token per sequence
  } ahead_counts_;
  std::vector<RowBest> spare_bests_;     // the bests of the next step to run ahead (then the pending one's)
  // Rows of logits a SeqStep samples: none, its last, or one per draft and one more (a forking slice has no drafts).
  template <class SeqStep>
  static size_t sampled_rows_of(const SeqStep& s) {
    return s.getSample() ? 1 + size_t{s.getDrafts()} : 0;
  }
  // Tokens a SeqStep's sampling draws: one per sampled row, or one per fork from its last.
  template <class SeqStep>
  static size_t sample_count(const SeqStep& s) {
    return s.getForks() > 1 ? s.getForks() : sampled_rows_of(s);
  }
  // Fills the batch's tokens that slices take from the previous step (previous_slots_) on the ranks that embed
  // them; an error message when one cannot be resolved (on every rank alike).
  std::string resolve_previous_tokens();
  // After the forward pass: turns the rows of slices with prompt logprobs into prompt_logprobs_ and leaves in
  // logits_ only the rows the step samples from.
  void take_prompt_logprobs(int vocab);
  // The greedy tokens of a step whose model gave row_bests_ (each row's best of the ids this rank holds): merged with
  // every TP rank's into greedy_tokens_; an error when the exchange failed.
  std::string pick_greedy();
  // sample_requests_, sample_seq_ids_ and fork_options_ of the step's sampled slices (a forking slice once per
  // fork); returns how many rows that is.
  template <class Seqs>
  size_t build_sample_requests(const Seqs& seqs);
  // Two-batch overlap: batch_ as m micro-batches of whole sequences balanced by tokens (core/micro_batch_split),
  // the first on `context`'s groups, micro-batch k on links_.micro[k - 1] (its collectives' time in
  // micro_comm_ns_[k - 1], its spans in micro_traces_[k - 1]); their logits into logits_ in batch order. With lanes
  // (or AFD) every rank runs every micro-batch (any may be empty), `lane_tokens[k]` the busiest lane's tokens in
  // micro-batch k (ExecuteStep.laneTokensPerMicroBatch).
  Status forward_overlapped(const ForwardContext& context, const std::vector<uint32_t>& lane_tokens);
  std::vector<uint32_t> lane_tokens_;            // the step's laneTokensPerMicroBatch
  // A JSON schema, regex or GBNF grammar compiled once per worker, with its states' masks over the vocabulary (the
  // sequences that ask for it share them).
  struct CompiledText {
    structured::CompiledFormat format;
    std::unique_ptr<structured::MaskCache> masks;
  };
  struct SequenceState {
    SamplingOptions sampling;
    uint32_t prompt_len = 0;
    int32_t lora = 0;               // 0: the base model; k: the model's k-th LoRA adapter
    std::vector<int32_t> stop_ids;  // sent when min_tokens masks them or a response format allows them at its end
    PenaltyHistory history;         // fed only when the sampling options have penalties
    std::vector<uint32_t> blocks;   // its KV block table
    // A response format's grammar over the generated text (structured/), on the sampling rank: fed each generated
    // token once, in position order (grammar_next: the next one's position), so that recompute and forks rebuild
    // it from the tokens; `allowed` the ids it takes next, made for each step that samples the sequence.
    std::optional<structured::OutputMatcher> grammar;
    std::shared_ptr<const CompiledText> text;  // json_schema / regex / grammar: what `grammar` matches against
    uint32_t grammar_next = 0;
    std::vector<uint64_t> allowed;
    // The draft tokens of its last slice (speculative decoding), at positions drafts_from ...: the history and the
    // grammar take the kept ones (the positions before its next slice) when that slice arrives.
    std::vector<int32_t> drafts;
    uint32_t drafts_from = 0;

    // Adds the token at `pos` to the penalty history: prompt below prompt_len, output from there on.
    void remember(uint32_t pos, int32_t id) {
      if (pos < prompt_len) history.add_prompt({&id, 1});
      else history.add_output(id);
    }
  };

  // worker_core_grammar.cpp, the history a sequence's sampling needs:
  // Feeds a slice's tokens to its sequence's penalty history and grammar, after the drafts its previous slice had
  // and kept (the positions before this slice); a slice's own drafts are fed only once a later slice shows them
  // kept. `drafts`: the slice's (its last tokens in batch_). An error as remember_token's.
  std::string remember_slice(uint64_t seq_id, SequenceState& st, const SeqSlice& slice, uint32_t drafts);
  // Draft rows after a slice's first: penalty histories and grammars with the drafts before each row fed
  // (draft_histories_, draft_grammars_), pointed to by their requests and row_grammars_.
  void prepare_draft_rows();
  // The token at `pos` into the penalty history (when the options have penalties) and, a generated one, into the
  // response format's grammar (each once, in position order); an error when tokens before it were never fed.
  std::string remember_token(uint64_t seq_id, SequenceState& st, uint32_t pos, int32_t id);
  // The ids each of the step's sampled rows with a response format may take (sample_requests_[r].allowed), a
  // sequence's once, over the pool; an error when the tokenizer cannot be loaded.
  std::string allow_next_tokens();
  // The vocabulary's token bytes for response formats, loaded from the model's tokenizer at the first use.
  Result<const structured::TokenVocabulary*> token_vocabulary();
  // A new sequence's grammar for its response format (json_object, or its json_schema, regex or GBNF grammar
  // compiled, each distinct one once); an error when it does not compile.
  std::string start_grammar(SequenceState& st);

  ModelRegistry registry_;
  RankLinks links_;
  std::filesystem::path model_dir_;
  std::optional<structured::TokenVocabulary> token_vocabulary_;
  // Compiled schemas, regexes and grammars by their format (a byte) and text (the last kMaxTexts
  // distinct ones; a sequence keeps its own alive), with their masks over token_vocabulary_: kMaskCacheBytes of them
  // in all.
  static constexpr size_t kMaxTexts = 64;
  std::unordered_map<std::string, std::shared_ptr<const CompiledText>> texts_;
  static constexpr int64_t kMaskCacheBytes = int64_t{128} << 20;
  std::shared_ptr<structured::MaskBudget> mask_budget_ = std::make_shared<structured::MaskBudget>(kMaskCacheBytes);
  std::vector<SequenceState*> sample_states_;  // per row of sample_requests_: its sequence's state
  // Per row of sample_requests_: the grammar that says its allowed ids (its sequence's own, or a draft row's below),
  // where they go and its sequence's stop ids; the distinct ones of a step, each once.
  struct RowGrammar {
    const structured::OutputMatcher* grammar = nullptr;  // null: no response format
    const structured::MaskCache* masks = nullptr;        // a schema's, regex's or grammar's: its sequence's
    std::vector<uint64_t>* allowed = nullptr;
    const std::vector<int32_t>* stop_ids = nullptr;
    bool operator==(const RowGrammar&) const = default;
  };
  std::vector<RowGrammar> row_grammars_, grammars_;
  // Speculative decoding, per row of sample_requests_: its slice's index in the step and its row among the slice's
  // sampled rows (draft row j sees the slice's first j drafts).
  std::vector<std::pair<uint32_t, uint32_t>> sample_rows_;
  // The penalty histories and grammars of draft rows after a slice's first (its sequence's with the drafts before
  // the row fed), rebuilt each step; deques: the requests point into them.
  struct DraftGrammar {
    structured::OutputMatcher grammar;
    std::vector<uint64_t> allowed;
  };
  std::deque<PenaltyHistory> draft_histories_;
  std::deque<DraftGrammar> draft_grammars_;
  RankPlace place_;
  std::string name_ = "worker";
  std::unique_ptr<cpu::ThreadPool> pool_;
  std::unique_ptr<exec::Backend> backend_;       // the rank's executor backend (runs on pool_); holds the weights
  std::unique_ptr<Model> model_;                 // loaded into backend_
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvCache> swap_;                // host swap space (WorkerInit.numSwapBlocks), same layout as kv_
  std::unordered_map<uint64_t, SequenceState> seqs_;
  std::vector<int32_t> previous_samples_;        // tokens the previous step sampled, in its result order
  // Whether every rank of this (lone) stage knows previous_samples_ (greedy tokens picked from the vocabulary shards,
  // the same decision on every rank): then the next step's tokens need no exchange (resolve_previous_tokens).
  bool tokens_everywhere_ = false;
  StepTrace trace_;                              // --trace: the current step's spans
  std::vector<std::pair<size_t, uint32_t>> previous_slots_;  // this step's (batch token index, fromPrevious)
  std::vector<int32_t> exchanged_;               // the resolved tokens of previous_slots_, as they travel
  bool previous_failed_ = false;
  // When the last step answered ended (a step that ran ahead: when its device work was seen done). Steps end in
  // order, so a step's compute time counts from its start or this, whichever is later: never twice.
  std::optional<std::chrono::steady_clock::time_point> last_step_end_;
  BatchSampler sampler_;
  ForwardBatch batch_;                           // reused across steps
  std::vector<SequenceState*> states_;           // [n_seqs] their state
  std::vector<float> logits_;                    // [n_sampled, vocab]
  // Two-batch overlap (WorkerInit.tbo): the models of micro-batches 1 .. m - 1 (twins sharing the weights), the
  // runner whose threads run them, a step's m micro-batches, their logits, the traces and collective times of
  // micro-batches 1 .., and the models' expert counts summed.
  bool tbo_ = false;
  int micro_batches_ = 2;
  std::vector<std::unique_ptr<Model>> twins_;
  std::unique_ptr<OverlapRunner> overlap_;
  std::vector<ForwardBatch> micro_;
  std::vector<std::vector<float>> micro_logits_;
  std::vector<StepTrace> micro_traces_;
  std::vector<uint64_t> micro_comm_ns_;
  std::vector<uint32_t> expert_sum_;
  std::vector<SampleRequest> sample_requests_;   // [n_sampled]
  std::vector<SampledToken> samples_;            // [n_sampled]
  // Greedy steps (ForwardContext::row_bests): each sampled row's best of this rank's vocabulary ids, every TP rank's
  // ([tp][n_sampled]), each micro-batch's with two-batch overlap, and the tokens (every rank of the stage alike).
  std::vector<RowBest> row_bests_, all_bests_;
  std::vector<std::vector<RowBest>> micro_bests_;
  std::vector<int32_t> greedy_tokens_;           // [n_sampled]
  std::vector<uint64_t> sample_seq_ids_;         // [n_sampled]: whose token each sample is (a fork: seqId + i)
  std::vector<SamplingOptions> fork_options_;    // options of each fork of a forking slice (seed + i)
  std::vector<float> fork_logits_;               // with forks: the sampled rows, a forking slice's once per fork
  struct PromptLogprobsChunk {
    uint64_t seq_id = 0;
    uint32_t first_pos = 0;
    std::vector<TokenLogprobs> entries;
  };
  std::vector<PromptLogprobsChunk> prompt_logprobs_;  // this step's, for StepResult.promptLogprobs
  struct PromptSlice {
    uint64_t seq_id = 0;
    int32_t from = -1;        // SeqStep.promptLogprobsFrom
    int32_t next_token = -1;  // SeqStep.nextPromptToken
    bool samples = false;     // SeqStep.sample (its last row is sampled; no drafts with prompt logprobs)
  };
  std::vector<PromptSlice> prompt_slices_;       // [slices of the step]
  Sampler prompt_sampler_;
};

}  // namespace actord
