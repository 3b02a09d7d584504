// Continuous batching: which sequences run in the next step, with how many tokens, in which KV blocks.
//
// Contract: pure logic, no actors, no clocks; owned and called by one scheduler actor. plan_step() builds at most
// one step at a time (the next plan waits for on_step_result of the previous one). Each step holds at most
// max_num_batched_tokens tokens and max_num_seqs sequences; running sequences come first (decode, or the next chunk
// of a chunked prefill), then waiting ones are admitted FCFS. When KV blocks run out, the most recently admitted
// running sequence is preempted by recompute: its blocks are freed and it goes back to the front of the queue with
// every token it has so far. No request is dropped for lack of memory unless it cannot fit even alone.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.hpp"
#include "executors/sampler.hpp"
#include "memory/block_allocator.hpp"

namespace actord {

struct SchedulerLimits {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int max_model_len = 512;
  int vocab_size = 0;  // prompt ids must be below it; 0: not checked
};

struct SequenceRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  uint32_t max_tokens = 16;
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  uint32_t owner = 0;  // the caller's tag for who submitted it (the scheduler actor: an index of its submitters)
};

enum class Finish { none, stop, length, error, cancelled };
const char* finish_name(Finish finish);

// Views into the sequence's own token and block lists (no copies: planning a step allocates nothing per
// sequence); valid while the plan is, i.e. until on_step_result / on_step_failed.
struct PlannedSlice {
  uint64_t seq_id = 0;
  std::span<const int32_t> tokens;        // [num tokens fed this step]
  int start_pos = 0;
  std::span<const uint32_t> block_table;  // [blocks covering start_pos + tokens.size()]
  bool sample = false;
  SamplingOptions sampling;
  uint32_t sample_index = 0;
};

struct StepPlan {
  std::vector<PlannedSlice> slices;
  int num_tokens = 0;
  int num_prefill_tokens = 0;  // tokens whose KV is computed for the first time or again after a preemption
  bool decode_only() const { return num_prefill_tokens == 0; }
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
};

class BatchScheduler {
 public:
  BatchScheduler(SchedulerLimits limits, BlockAllocator& blocks);

  // Queues a request. Returns an update with Finish::error when it can never run (empty prompt, longer than the
  // context, more KV than the whole lease); nothing is queued then.
  std::optional<SequenceUpdate> add(SequenceRequest request);
  // Cancels a queued or running request; returns its final update, or nothing if the id is unknown. A sequence in
  // the step in flight is finished when that step's result arrives.
  std::optional<SequenceUpdate> cancel(uint64_t id);

  bool step_in_flight() const { return in_flight_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // The next step, or nullptr when there is nothing to run or a step is in flight. The plan stays owned by the
  // scheduler and valid until on_step_result / on_step_failed.
  const StepPlan* plan_step();
  // sampled: one (seq id, token) per slice with sample = true, in plan order.
  std::vector<SequenceUpdate> on_step_result(const std::vector<std::pair<uint64_t, int32_t>>& sampled);
  // The step in flight failed: every sequence in it finishes with `error`.
  std::vector<SequenceUpdate> on_step_failed(const std::string& error);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  uint64_t num_preemptions() const { return preemptions_; }

 private:
  struct Sequence {
    SequenceRequest req;
    std::vector<int32_t> tokens;        // prompt + generated
    uint32_t prompt_len = 0;
    uint32_t generated = 0;
    int num_computed = 0;               // tokens whose KV is in the cache
    std::vector<uint32_t> blocks;
    bool cancelled = false;
  };

  bool ensure_blocks(Sequence& seq, int num_tokens);
  void preempt(Sequence& seq);
  void release(Sequence& seq);
  std::optional<SequenceUpdate> check_finished(Sequence& seq);
  // A sequence ends (finish length) when it reaches the context length or fills the whole KV lease: it could not
  // take another step even alone.
  int max_tokens_held() const;
  // Appends seq's next `chunk` tokens to the plan being built (slice and planned_ entry).
  const PlannedSlice& add_slice(Sequence& seq, int chunk);

  SchedulerLimits limits_;
  BlockAllocator& blocks_;
  std::unordered_map<uint64_t, Sequence> seqs_;
  std::deque<uint64_t> waiting_;
  std::vector<Sequence*> running_;  // admission order (seqs_ nodes: stable until erased, and released first)
  std::vector<Sequence*> planned_;  // the sequence of each of plan_'s slices (map nodes are stable)
  StepPlan plan_;            // the step in flight when in_flight_; its storage is reused step after step
  bool in_flight_ = false;
  uint64_t preemptions_ = 0;
};

}  // namespace actord
