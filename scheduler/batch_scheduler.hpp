// Continuous batching: which sequences run in the next step, with how many tokens, in which KV blocks.
//
// Contract: pure logic, no actors, no clocks; owned and called by one scheduler actor. At most two steps are in
// flight (three when asked: set_max_steps_in_flight). plan_step() with none in flight plans from what is known;
// with steps in flight (and plan_ahead on) it plans the following step before their results are back, so the worker finds its next step queued when it
// finishes one and the scheduler's own work overlaps the compute (vLLM's async scheduling, SGLang's overlap
// scheduler). A sequence whose slice in the newest step in flight samples a token is planned ahead for one more
// token whose value only the worker knows yet: its slice carries `from_previous`, the index of that sample in the
// newest step in flight, and the worker feeds the token it sampled there. Results come back in step order (on_step_result /
// on_step_failed answer the oldest step in flight).
//
// Each step holds at most max_num_batched_tokens tokens and max_num_seqs sequences; running sequences come first
// (decode, or the next chunk of a chunked prefill), then waiting ones are admitted in the order the scheduling
// policy gives (scheduling_policy.hpp: FCFS by default, or by priority, or a plugin's), which may also preempt
// running ones for them. When KV blocks run out the policy's victim (FCFS: the most recently admitted running
// sequence) is preempted: by recompute (its blocks are freed and it goes back to the front of the queue with every
// token it has so far, to prefill them again) or, with preemption_mode swap and room in the host swap space, by
// swap (the next step copies its computed blocks to host blocks the scheduler assigns, and the step that admits it
// again copies them back into fresh blocks, before either step's forward pass). Preemption only happens with no step in flight: when planning ahead would need it,
// plan_step() returns nothing and the next plan waits for the step in flight. A
// Blocks come from a PrefixCache over the lease: a (re-)admitted sequence skips the prefill of its longest cached
// prefix in whole blocks, and a block is cached once the step that wrote its last token has returned. A
// sequence planned ahead that ends in the step before (a stop id) wastes that one slice: its result is dropped
// and its blocks are freed only when no step in flight writes them any more. A sequence known to end by length is
// never planned ahead. No request is dropped for lack of memory unless it cannot fit even alone.
//
// A request of n > 1 samples (sampling.n) runs as one sequence (id) through its prompt: its prefill is computed
// once and takes n seats of max_num_seqs from admission. The slice that samples its first token forks it (that
// slice is never planned ahead): sample i (id + i, seed + i) shares the prompt's full blocks (reference counted)
// and gets a copy of the partial last block, made by the next step sent before its forward pass (copy-on-write);
// when no block is free for the copy, that sample recomputes its prompt instead. From then on the samples are
// independent sequences. Ids id + 1 .. id + n - 1 are reserved for them from add().
//
// Speculative decoding (SchedulerLimits::speculative): a decoding sequence whose tokens are all known may get draft
// tokens from its own text (scheduler/ngram_drafter.hpp). Its slice then feeds its last token and the drafts, and
// the worker samples every one of those rows as it would sample them one step at a time (row j with sample index
// sample_index + j, so seeded draws are the same); the scheduler keeps the drafts the samples confirm, in order,
// and the first sample that differs (or the one after the last draft). A sequence thus gains 1 .. drafts + 1 tokens
// in a step, exactly the tokens decoding without drafts would give where the backend's logits are batch invariant
// (the CPU executor's are; elsewhere the draws follow the same distribution).
// Rejected drafts' KV positions are written over by later steps; only positions of kept tokens count as computed
// and are ever cached. Penalties and a response format's grammar see each row's drafts before it (the worker feeds
// its copies of their state). No drafts before a request of n > 1 forks, or past max_tokens and the context.
// Drafts need a sequence's last token known, so they are only planned with no step in flight, and no step is
// planned ahead of one with drafts or of one whose sequences want drafts (each result is probed for a match): text
// that repeats itself is verified step by step, text that does not keeps planning ahead.
//
// Prefill/decode disaggregation (SchedulerLimits::hand_off_prefilled, a replica of role prefill): a sequence of one
// sample that computes its tokens here is never planned past its first sample; once that sample is back (and
// reported in the step's updates) and the sequence goes on, it leaves the running list and take_handed_off() gives
// it as a continuation with its KV positions (every token known but the last). It keeps its blocks, unplanned,
// until release_handed_off(id): the caller reads its KV out of the worker first. A sequence that arrived with its
// KV (an import: it was prefilled elsewhere) decodes here, as do requests of n > 1 samples (they fork at their
// first sample). No drafts are proposed for a sequence that hands off.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/sampling_options.hpp"
#include "core/status.hpp"
#include "memory/block_allocator.hpp"
#include "memory/prefix_cache.hpp"
#include "scheduler/ngram_drafter.hpp"
#include "scheduler/scheduling_policy.hpp"

namespace actord {

// Speculative decoding by prompt lookup (the topology's `speculative:` section).
struct SpeculativeLimits {
  int num_tokens = 0;              // drafts per sequence and step at most; 0: off
  int lookup_min = 2;              // n-gram lengths matched against the sequence's earlier tokens
  int lookup_max = 4;
  int disable_by_batch_size = 0;   // no drafts while this many sequences or more run (0: always drafts)
  bool enabled() const { return num_tokens > 0; }
};

struct SchedulerLimits {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int max_model_len = 512;
  int vocab_size = 0;       // prompt ids must be below it; 0: not checked
  bool plan_ahead = true;   // plan step N+1 while step N executes
  // Blocks of the whole KV pool (the lease can grow up to it): what a request may need at most. 0: the lease
  // given to the constructor is all there is.
  uint32_t pool_blocks = 0;
  uint32_t lease_reserve = 0;  // free blocks kept on lease when giving blocks back
  bool enable_prefix_caching = true;  // admissions reuse the KV of cached full blocks with the same tokens
  PreemptionMode preemption_mode = PreemptionMode::recompute;
  uint32_t swap_blocks = 0;  // blocks of host swap space (the worker's); preemption_mode swap needs some
  // engine.reshape_kv: a reshape's running sequences move to the new replicas with their KV blocks (true) or are
  // recomputed there from their tokens (false). The scheduler actor's business; the batcher only says which can.
  bool move_kv = true;
  // A check of a structured request's response format that the scheduler cannot make itself (that its JSON
  // schema compiles: the scheduler actor gives structured/'s); its error refuses the request. Null: none.
  std::function<Status(const SamplingOptions&)> check_response_format;
  SpeculativeLimits speculative;
  int num_lora_adapters = 0;  // LoRA adapters the workers serve: requests may name 0 (the base) .. this
  // Prefill/decode disaggregation (groups[].role: prefill): a sequence that computed its prompt here hands off once
  // its first token is sampled (take_handed_off) instead of decoding here.
  bool hand_off_prefilled = false;
};

struct SequenceRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  uint32_t max_tokens = 16;
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  int32_t priority = 0;  // for the priority policy: lower runs first
  uint32_t owner = 0;  // the caller's tag for who submitted it (the scheduler actor: an index of its submitters)
  // 0: the base model; k: the k-th LoRA adapter (lora.modules). Its KV is its own: cached prefixes are matched
  // among the same adapter's only.
  uint32_t lora = 0;
  // A continuation (take_all / take_waiting elsewhere): the tokens it generated before, already reported to its
  // client. They count against max_tokens and in the penalties, are recomputed with the prompt, and are never
  // reported again; the draws go on at sample index resumed.size(), so a seeded request continues as it would have.
  std::vector<int32_t> resumed;
  uint32_t prompt_logprobs_reported = 0;  // prompt positions below it had their logprob reported (not again)
  // Failures it was handed back for in a row without generating a token between them (the scheduler actor bounds
  // them: a request that kills every worker it reaches fails), and resumed.size() at the last of them.
  uint32_t hand_backs = 0;
  uint32_t resumed_at_hand_back = 0;
};


enum class Finish { none, stop, length, error, cancelled };
const char* finish_name(Finish finish);

// Views into the sequence's own token and block lists (no copies: planning a step allocates nothing per
// sequence). The spans are valid until the next plan_step(): encode the step right away.
struct PlannedSlice {
  uint64_t seq_id = 0;
  std::span<const int32_t> tokens;        // [num_tokens] fed this step; empty when from_previous >= 0
  int num_tokens = 0;
  int start_pos = 0;
  std::span<const uint32_t> block_table;  // [blocks covering start_pos + num_tokens], all of them
  // The blocks the worker does not know of yet: the whole table for a new sequence, else those added since its
  // previous slice (the worker keeps each sequence's table).
  std::span<const uint32_t> new_blocks;
  bool sample = false;
  uint32_t sample_index = 0;              // tokens the sequence generated before the one sampled here
  int32_t from_previous = -1;             // >= 0: one token, the one sampled at this index of the previous step
  // > 0 (speculative decoding): the last `drafts` tokens are guesses; the slice samples each of its last drafts + 1
  // rows (sample indices sample_index, sample_index + 1, ...), and its result has that many samples.
  int drafts = 0;
  // First slice since the sequence was admitted (or re-admitted after a preemption): the worker (re)creates its
  // state for it from `request` (sampling options, prompt length, stop ids).
  bool new_sequence = false;
  const SequenceRequest* request = nullptr;
  std::span<const int32_t> context;       // the sequence's tokens before start_pos (with new_sequence: a cached prefix)
  // > 1: this slice's sample is the first of a request of `forks` samples (sampling.n): the worker draws `forks`
  // tokens from its last row, the i-th with sampling.for_sample(i), reported as seq_id + i.
  uint32_t forks = 0;
  // >= 0 (prompt logprobs): report the logprob of each prompt token from this position on that the slice's rows
  // predict; next_prompt_token is the prompt token after the slice's tokens (-1 when the prompt ends in it).
  int32_t prompt_logprobs_from = -1;
  int32_t next_prompt_token = -1;
};

// A copy of one KV block to another (wire::BlockCopy).
struct BlockCopy {
  uint32_t src = 0;
  uint32_t dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

struct StepPlan {
  std::vector<PlannedSlice> slices;
  std::vector<uint64_t> released;  // sequences the worker may forget (ended or preempted); applied before slices
  // Block copies the worker makes before the forward pass, in this order: `copies` pool -> pool (copy-on-write of
  // forked samples, made before one of them may be swapped out), `swap_out` pool -> host swap space (preempted by
  // swapping), `swap_in` host -> pool (swapped ones admitted again, possibly into blocks just swapped out).
  std::vector<BlockCopy> copies, swap_out, swap_in;
  int num_tokens = 0;
  int num_prefill_tokens = 0;      // tokens whose KV is computed for the first time or again after a preemption
  int num_samples = 0;             // samples its result carries (a forking slice: forks; with drafts: drafts + 1)
  int num_drafts = 0;              // draft tokens among num_tokens
  bool planned_ahead = false;      // planned while the previous step was in flight
  bool decode_only() const { return num_prefill_tokens == 0; }
};

// One sampled token of a step's result, in plan order of the sampling slices.
struct StepSample {
  uint64_t seq_id = 0;
  int32_t token = 0;
  std::optional<TokenLogprobs> logprobs;
};

// The logprobs of prompt tokens at positions first_pos, first_pos + 1, ... of one sequence, from one step.
struct StepPromptLogprobs {
  uint64_t seq_id = 0;
  uint32_t first_pos = 0;
  std::vector<TokenLogprobs> entries;
};

// What happened to one sequence in a step: tokens it generated and whether it finished.
struct SequenceUpdate {
  uint64_t id = 0;
  std::vector<int32_t> new_tokens;
  Finish finish = Finish::none;
  std::string error;
  Errc error_code = Errc::internal;  // with Finish::error: invalid_argument for refused requests, else worker_failed
  uint32_t prompt_tokens = 0;
  uint32_t owner = 0;                // SequenceRequest::owner of its request
  std::vector<TokenLogprobs> logprobs;  // one per new token when the request asked for logprobs
  // A final update of a request of n > 1 samples that ended before its first token (refused, cancelled, failed):
  // samples id + 1 .. id + unforked_samples end the same way, with no tokens.
  uint32_t unforked_samples = 0;
  // Prompt logprobs of positions prompt_logprobs_from, ... (requests with sampling.prompt_logprobs >= 0; each
  // position is reported once, in order, across the updates of the request).
  std::vector<TokenLogprobs> prompt_logprobs;
  uint32_t prompt_logprobs_from = 0;
};

// The updates of one call, kept from call to call so that their vectors keep their storage (no allocation per
// sequence per step).
class UpdateList {
 public:
  void reset() { size_ = 0; }
  // A cleared entry for sequence `id` at the end of the list.
  SequenceUpdate& add(uint64_t id, uint32_t prompt_tokens, uint32_t owner);
  void drop_last() { --size_; }
  std::span<const SequenceUpdate> view() const { return {items_.data(), size_}; }

 private:
  std::vector<SequenceUpdate> items_;
  size_t size_ = 0;
};

// What take_all() / take_waiting() give back: continuations of the live sequences (SequenceRequest::resumed), in
// arrival order, and final updates of those cancelled while a lost step carried them.
struct HandBack {
  std::vector<SequenceRequest> requests;
  std::vector<SequenceUpdate> cancelled;
};

// A prefilled sequence leaving for a decode replica (take_handed_off): its continuation (resumed: the tokens it
// generated, reported already) and the positions of its KV the worker holds for it.
struct HandOff {
  SequenceRequest continuation;
  int kv_tokens = 0;
};

class BatchScheduler {
 public:
  static constexpr int kMaxStepsInFlight = 3;

  // policy: null for FCFS. (Shared only so that actors can carry it; one scheduler uses it.)
  BatchScheduler(SchedulerLimits limits, BlockAllocator& blocks, std::shared_ptr<SchedulingPolicy> policy = nullptr);

  // Queues a request. Returns an update with Finish::error when it can never run (bad sampling options, empty
  // prompt, longer than the context, more KV than the whole lease); nothing is queued then.
  // With `kv_blocks`: the request continues a sequence whose first `kv_tokens` positions' KV was written into those
  // blocks (taken with take_blocks, an import): admitted, it computes only from there, as after a prefix cache hit.
  // Refused, the blocks go back.
  std::optional<SequenceUpdate> add(SequenceRequest request, std::vector<uint32_t> kv_blocks = {}, int kv_tokens = 0);
  // KV blocks that `num_tokens` positions take.
  size_t blocks_for(int num_tokens) const {
    return (static_cast<size_t>(num_tokens) + limits_.block_size - 1) / limits_.block_size;
  }
  // Blocks for `num_tokens` positions from the lease (nothing when it has too few), and back.
  std::optional<std::vector<uint32_t>> take_blocks(int num_tokens);
  void return_blocks(std::vector<uint32_t>& blocks);
  // Before take_all(): the live sequences whose KV could move with them, and how many positions of it the worker
  // holds for sure (every token known but the last: the steps that returned computed them): decoding (a token
  // generated), one sample, not swapped out, the worker holding their state.
  std::vector<std::pair<uint64_t, int>> movable_kv() const;
  // Cancels a queued or running request; returns its final update, or nothing if the id is unknown or a step in
  // flight carries it (it is finished, as cancelled, when that step's result arrives).
  std::optional<SequenceUpdate> cancel(uint64_t id);

  int steps_in_flight() const { return in_flight_; }
  // How many steps may be in flight: 1, or with plan_ahead 2 (the default) or 3 (when a step computes faster than
  // a message round trip, a third step keeps the worker busy). Takes effect at the next plan_step().
  void set_max_steps_in_flight(int n);
  int max_steps_in_flight() const { return max_in_flight_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // The next step, or nullptr when there is nothing to run, two steps are in flight, or one is and this step
  // cannot be planned ahead of it. The plan stays owned by the scheduler until its result is reported.
  const StepPlan* plan_step();
  // The oldest step in flight came back: `sampled` has one entry per slice with sample = true (a forking slice:
  // `forks` entries), in plan order; `prompt` the prompt logprobs of its slices that asked for them. The updates
  // stay valid until the next on_step_result / on_step_failed.
  std::span<const SequenceUpdate> on_step_result(std::span<const StepSample> sampled,
                                                 std::span<StepPromptLogprobs> prompt = {});
  // The oldest step in flight failed: every live sequence in it finishes with `error` (valid as above).
  std::span<const SequenceUpdate> on_step_failed(const std::string& error);

  // Hand-back, for data parallel replicas. take_all(): the worker is lost; every live sequence leaves as a
  // continuation with the tokens reported so far (those of steps in flight are forgotten: their results must not
  // be reported), and the scheduler is left empty with every block back in the lease. take_waiting(): a replica
  // drains; the sequences no step carries and not running (never admitted, or preempted) leave, the running ones
  // stay to finish here.
  // take_unstarted(): a replica joined the group (a scale-up); the waiting sequences that hold no KV here, on the
  // device or swapped out (never admitted, or preempted by recompute), leave, so that the router may spread them
  // over the group again: nothing computed is lost.
  // take_all() forgets sequences handed off and not released too (their continuations left with take_handed_off).
  HandBack take_all();
  HandBack take_waiting();
  HandBack take_unstarted();
  // Prefill/decode disaggregation: the sequences that finished their prefill since the last call (see the header
  // comment), in the order their results came; and, once their KV was read out, their blocks back to the lease
  // (the worker is told to forget them in the next plan). An unknown id is ignored.
  std::vector<HandOff> take_handed_off();
  void release_handed_off(uint64_t id);
  size_t num_handing_off() const;  // handed off and not released (O(sequences): for tests and reports)
  // Tokens still to compute for the live sequences: prompt (and recompute) tokens not computed yet plus tokens
  // still to generate. O(sequences): for load reports, not per step.
  uint64_t outstanding_tokens() const;
  // The prefill backlog: tokens of the live sequences still to prefill (prompts, and whole sequences preempted by
  // recompute or handed here as continuations), not counting the one token a decoding sequence feeds each step.
  // O(sequences): for load reports (autoscale.target_prompt_tokens), not per step.
  uint64_t prefill_backlog() const;

  // The KV lease. The scheduler allocates from the BlockAllocator it was given (its lease of the kv_pool's blocks)
  // and never waits for the pool: its actor grows the lease in bulk when a plan ran short and gives back what it
  // does not need. While a grant is on its way (set_lease_growing), a shortage stalls the sequences that lack
  // blocks instead of preempting them.
  size_t blocks_wanted() const { return shortfall_; }  // blocks the last plan lacked (0: none)
  size_t blocks_spare() const;                         // free blocks beyond the reserve, when nothing waits
  void set_lease_growing(bool growing) { growing_ = growing; }

  PrefixCacheStats prefix_cache_stats() const { return cache_.stats(); }

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  size_t num_swapped() const;  // waiting sequences whose KV is in host swap space
  uint64_t num_preemptions() const { return preemptions_; }  // by recompute and by swap
  uint64_t num_swap_outs() const { return swap_outs_; }
  uint64_t num_swap_ins() const { return swap_ins_; }
  uint64_t num_draft_tokens() const { return draft_tokens_; }      // drafts of steps that returned
  uint64_t num_accepted_drafts() const { return accepted_drafts_; }  // of which the samples confirmed
  size_t swapped_blocks() const { return swap_space_.num_total() - swap_space_.num_free(); }

 private:
  struct Sequence {
    SequenceRequest req;
    std::vector<int32_t> tokens;        // prompt + generated tokens known so far
    uint32_t prompt_len = 0;
    uint32_t generated = 0;             // generated tokens known so far
    int pending = 0;                    // sampled in a step in flight, value not known yet
    int num_computed = 0;               // positions whose KV is computed or being computed by a step in flight
    int in_flight = 0;                  // steps in flight that carry it
    int32_t last_sample_slot = -1;      // its last sample's index in the step that takes it
    uint64_t last_sample_step = 0;      // that step's serial
    std::vector<uint32_t> blocks;
    std::vector<uint32_t> host_blocks;  // swapped out: its computed blocks [0, blocks_for(num_computed)) are there
    size_t blocks_sent = 0;             // blocks[0, blocks_sent) are in the worker's table for it
    int prompt_logprobs_planned = 1;    // prompt positions below it have their logprob asked for (position 0 has none)
    uint32_t prompt_logprobs_reported = 0;  // prompt positions below it had their logprob reported
    bool fresh = true;                  // not planned since its (re-)admission: the worker has no state for it
    bool sent = false;                  // the worker may hold state for it
    bool cancelled = false;
    bool finished = false;              // its final update went out; kept only while a step in flight writes it
    uint64_t arrival = 0;               // submission order
    std::unique_ptr<NgramDrafter> drafter;  // speculative decoding: its n-gram index, made at its first draft
    std::vector<int32_t> fed;           // a slice with drafts feeds these: its last token, then the drafts
    bool wants_drafts = false;          // its last slice drafted, or its known tokens end in text seen before
    // Never hands off (hand_off_prefilled): it arrived with its KV (prefilled elsewhere), or is or was forked from
    // a request of n > 1 samples.
    bool decodes_here = false;
    bool leaving = false;               // handed off: holds its blocks until release_handed_off
  };
  struct Step {
    StepPlan plan;
    std::vector<Sequence*> seqs;        // the sequence of each slice (map nodes are stable until erased)
  };

  // Starts loading every cache line of seq (its fields are spread over several; it comes back cold from a step).
  static void prefetch(const Sequence* seq);
  bool ensure_blocks(Sequence& seq, int num_tokens);
  // add() without giving kv_blocks back when it refuses (the caller does).
  std::optional<SequenceUpdate> add_checked(SequenceRequest request, std::vector<uint32_t>& kv_blocks, int kv_tokens);
  // The fork slice of `parent` came back: samples[i] is sample i + 1's first token. Creates those sequences and
  // appends their updates.
  void fork(Sequence& parent, std::span<const StepSample> samples);
  // Makes `update` seq's final one, with `finish`: it ends the samples seq has not forked yet too, whose ids are
  // free again.
  void finish_update(Sequence& seq, SequenceUpdate& update, Finish finish);
  void remove_from_running(Sequence& seq);
  // Takes seq off the running list back to the front of the queue, by swap or recompute (limits_.preemption_mode).
  void preempt(Sequence& seq);
  // A swapped-out seq admitted again: blocks for its computed tokens and the next `chunk`, its KV copied back into
  // them by `step`. False (nothing changed) when the lease lacks the blocks.
  bool swap_in(Step& step, Sequence& seq, int chunk);
  void release(Sequence& seq);
  void erase(Sequence& seq);
  // The waiting sequences no step carries for which `leaves` holds, as continuations (take_waiting, take_unstarted).
  template <class Leaves>
  HandBack take_waiting_if(Leaves leaves);
  // seq as a request that continues it elsewhere (SequenceRequest::resumed).
  SequenceRequest continuation_of(const Sequence& seq) const;
  // Ends seq after its final update: freed now, or once no step in flight carries it (call it again then).
  void retire(Sequence& seq);
  // How seq ends after its latest token (Finish::none: it goes on).
  Finish finish_of(const Sequence& seq) const;
  bool ends_by_length_after_pending(const Sequence& seq) const;
  // A sequence ends (finish length) when it reaches the context length or fills the whole KV lease: it could not
  // take another step even alone.
  int max_tokens_held() const;
  size_t pool_blocks() const { return limits_.pool_blocks ? limits_.pool_blocks : blocks_.num_total(); }
  // Appends seq's next `chunk` tokens (or its pending token when from_previous >= 0; or with drafts > 0, seq.fed)
  // to `step`.
  void add_slice(Step& step, Sequence& seq, int chunk, int32_t from_previous, int drafts = 0);
  // Speculative decoding: drafts for decoding seq into seq.fed (behind its last token) with their KV blocks, at
  // most budget - 1 of them; 0 when it gets none.
  int propose_drafts(Sequence& seq, int budget);
  bool may_draft(const Sequence& seq) const;  // whether its sampling and the batch allow drafts
  // Whether seq hands off after its next sample here (hand_off_prefilled and not decodes_here).
  bool hands_off(const Sequence& seq) const;
  // Up to max_drafts drafts for seq's known tokens into drafts_ (its n-gram index made at the first look).
  void look_up_drafts(Sequence& seq, int max_drafts);
  // Speculation plans a step ahead only when the newest step in flight has no drafts (its sequences' positions
  // after it are unknown until it returns) and none of its sequences wants drafts (drafts need its tokens known:
  // the plan waits for the result).
  bool speculation_allows_ahead() const;
  // After seq's tokens grew: whether its next slice should draft (its known tokens end in text seen before).
  void note_draftable(Sequence& seq);
  PolicySequence view_of(const Sequence& seq) const;
  // Asks the policy whom to admit (and preempt) into decision_; false when it wants a preemption while steps are
  // in flight (the plan must wait for them).
  bool consult_policy(bool ahead);
  // With blocks short for running_[first]: the policy's victim among running_[first..].
  Sequence* pick_victim(size_t first);
  void admit(Step& step, int& budget);
  // A fresh sequence takes the cached full blocks of its longest cached prefix (always leaving its last token to
  // compute: its logits are needed) and starts computing after them.
  void reuse_cached_prefix(Sequence& seq);
  // After a step wrote positions [written_from, written_to): the sequence's full blocks become matchable.
  void cache_full_blocks(Sequence& seq, int written_from, int written_to);
  // Makes the plan in `step` the newest step in flight: advances every planned sequence.
  void commit(Step& step);
  // Takes the oldest step in flight off the ring (its storage stays valid until the ring comes round to it).
  Step& pop_oldest();

  SchedulerLimits limits_;
  BlockAllocator& blocks_;
  PrefixCache cache_;                        // every block is allocated and released through it
  std::shared_ptr<SchedulingPolicy> policy_;
  PolicyDecision decision_;                  // scratch
  std::vector<PolicySequence> waiting_view_, running_view_;  // scratch
  uint64_t next_arrival_ = 0;
  std::unordered_map<uint64_t, Sequence> seqs_;
  std::deque<uint64_t> waiting_;
  std::vector<Sequence*> running_;  // admission order
  std::array<Step, kMaxStepsInFlight> steps_;  // ring; storage reused step after step
  int head_ = 0;                    // index of the oldest step in flight
  int in_flight_ = 0;
  int max_in_flight_ = 2;
  uint64_t next_serial_ = 1;        // serial of the next step committed
  bool needs_sync_ = false;         // planning ahead failed: wait for the step in flight, then plan
  bool growing_ = false;            // a lease grant is on its way
  size_t shortfall_ = 0;            // blocks the last plan lacked
  std::vector<uint64_t> released_;  // for the next plan's `released`
  UpdateList updates_;              // of the last on_step_result / on_step_failed
  std::vector<BlockCopy> swap_out_;  // for the next plan's `swap_out`
  std::vector<BlockCopy> copies_;    // for the next plan's `copies` (copy-on-write of forked samples)
  int fork_seats_ = 0;               // seats of max_num_seqs held for the unforked samples of running sequences
  std::unordered_set<uint64_t> reserved_ids_;  // ids of samples not forked yet
  BlockAllocator swap_space_;        // host swap blocks (the worker holds the bytes)
  std::vector<PolicySequence> swapped_view_;  // scratch
  uint64_t preemptions_ = 0;
  uint64_t swap_outs_ = 0;
  uint64_t swap_ins_ = 0;
  uint64_t draft_tokens_ = 0;
  uint64_t accepted_drafts_ = 0;
  std::vector<int32_t> drafts_;      // scratch
  std::vector<uint64_t> handed_off_;  // for take_handed_off
};

}  // namespace actord
