// Continuous batching, scripted step by step: what runs, chunking, preemption, finishing, refusals.
#include <catch2/catch.hpp>
#include <map>

#include "scheduler/batch_scheduler.hpp"
#include "scheduler_test_util.hpp"

using namespace actord;
using test::answer;
using test::request;

namespace {

// Limits without the prefix cache: every block a sequence frees goes straight back to the lease.
SchedulerLimits plain(SchedulerLimits limits) {
  limits.enable_prefix_caching = false;
  return limits;
}

// Limits with planning ahead off: one step in flight at a time.
SchedulerLimits one_at_a_time(SchedulerLimits limits) {
  limits.plan_ahead = false;
  return plain(limits);
}

}  // namespace

TEST_CASE("prefill then decode - one step in flight at a time", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(one_at_a_time({8, 64, 4, 512, 0}), blocks);
  REQUIRE_FALSE(s.add(request(1, 6, 3)).has_value());
  auto plan = s.plan_step();
  REQUIRE(plan);
  REQUIRE(plan->slices.size() == 1);
  CHECK(plan->slices[0].tokens.size() == 6);
  CHECK(plan->slices[0].start_pos == 0);
  CHECK(plan->slices[0].block_table.size() == 2);  // 6 tokens in blocks of 4
  CHECK(plan->slices[0].sample);
  CHECK_FALSE(s.plan_step());  // the previous step has not come back
  auto updates = answer(s, *plan, 99);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{99});
  CHECK(updates[0].finish == Finish::none);

  plan = s.plan_step();
  REQUIRE(plan);
  CHECK(std::vector<int32_t>(plan->slices[0].tokens.begin(), plan->slices[0].tokens.end()) == std::vector<int32_t>{99});
  CHECK(plan->slices[0].start_pos == 6);
  CHECK(plan->slices[0].sample_index == 1);
  answer(s, *plan, 98);
  plan = s.plan_step();
  updates = answer(s, *plan, 97);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].finish == Finish::length);
  CHECK(blocks.num_free() == 16);  // everything returned
  CHECK_FALSE(s.has_work());
}

TEST_CASE("several requests share one step - decode first - then admissions", "[scheduler]") {
  BlockAllocator blocks(64);
  BatchScheduler s(plain({8, 64, 4, 512, 0}), blocks);
  s.add(request(1, 5, 10));
  auto plan = s.plan_step();
  answer(s, *plan, 50);
  s.add(request(2, 7, 10));
  s.add(request(3, 3, 10));
  plan = s.plan_step();
  REQUIRE(plan->slices.size() == 3);
  CHECK(plan->slices[0].seq_id == 1);
  CHECK(plan->slices[0].tokens.size() == 1);
  CHECK(plan->slices[1].seq_id == 2);
  CHECK(plan->slices[2].seq_id == 3);
  CHECK(plan->num_tokens == 1 + 7 + 3);
}

TEST_CASE("long prompts are chunked by the token budget", "[scheduler]") {
  BlockAllocator blocks(64);
  BatchScheduler s(plain({8, 16, 4, 512, 0}), blocks);
  s.add(request(1, 40, 2));
  int steps = 0;
  int fed = 0;
  for (;;) {
    auto plan = s.plan_step();
    REQUIRE(plan);
    ++steps;
    CHECK(plan->num_tokens <= 16);
    fed += plan->num_tokens;
    const bool sampled = plan->slices[0].sample;
    answer(s, *plan, 7);
    if (sampled) break;
  }
  CHECK(steps == 3);  // 16 + 16 + 8
  CHECK(fed == 40);
}

TEST_CASE("max_num_seqs caps the running set", "[scheduler]") {
  BlockAllocator blocks(64);
  BatchScheduler s(plain({2, 64, 4, 512, 0}), blocks);
  for (uint64_t id = 1; id <= 3; ++id) s.add(request(id, 2, 5));
  auto plan = s.plan_step();
  CHECK(plan->slices.size() == 2);
  CHECK(s.num_waiting() == 1);
}

TEST_CASE("stop ids finish a sequence and report the id", "[scheduler]") {
  BlockAllocator blocks(8);
  BatchScheduler s(plain({8, 64, 4, 512, 0}), blocks);
  s.add(request(1, 3, 100, {2}));
  auto plan = s.plan_step();
  auto updates = answer(s, *plan, 2);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].finish == Finish::stop);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{2});
}

TEST_CASE("when blocks run out the newest sequence is preempted and recomputed later", "[scheduler]") {
  BlockAllocator blocks(3);  // block_size 2: 6 token slots
  BatchScheduler s(plain({8, 64, 2, 512, 0}), blocks);
  s.add(request(1, 2, 10));
  s.add(request(2, 2, 10));
  auto plan = s.plan_step();
  REQUIRE(plan->slices.size() == 2);  // 1 block each
  answer(s, *plan, 5);
  // Both need a second block at position 2; only one is free: seq 2 (newest) is preempted.
  plan = s.plan_step();
  REQUIRE(plan->slices.size() == 1);
  CHECK(plan->slices[0].seq_id == 1);
  CHECK(s.num_preemptions() == 1);
  CHECK(s.num_waiting() == 1);
  answer(s, *plan, 6);
  // Run seq 1 to completion; seq 2 comes back with its generated token as part of its prompt.
  std::vector<int32_t> seq2_prefill;
  while (s.has_work()) {
    plan = s.plan_step();
    REQUIRE(plan);
    for (const auto& slice : plan->slices)
      if (slice.seq_id == 2 && slice.start_pos == 0) seq2_prefill.assign(slice.tokens.begin(), slice.tokens.end());
    answer(s, *plan, 6);
    if (!seq2_prefill.empty()) break;
  }
  CHECK(seq2_prefill == std::vector<int32_t>{10, 11, 5});  // prompt + the token it had generated
}

TEST_CASE("requests that can never run are refused with a reason", "[scheduler]") {
  BlockAllocator blocks(4);
  BatchScheduler s(plain({8, 64, 4, 32, 512}), blocks);
  auto r = s.add(request(1, 0, 4));
  REQUIRE(r);
  CHECK(r->error == "the prompt is empty");
  r = s.add(request(2, 40, 4));
  REQUIRE(r);
  CHECK(r->error == "the prompt has 40 tokens, more than the context length of 32");
  r = s.add(request(3, 20, 4));
  REQUIRE(r);
  CHECK(r->error == "the prompt needs 5 KV blocks, the cache has only 4");
  auto bad = request(4, 2, 4);
  bad.prompt[1] = 600;
  r = s.add(bad);
  REQUIRE(r);
  CHECK(r->error == "prompt token id 600 is outside the vocabulary (size 512)");
  CHECK(r->error_code == Errc::invalid_argument);
  CHECK_FALSE(s.has_work());
}

TEST_CASE("generation stops at the context length", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({8, 64, 4, 8, 0}), blocks);
  s.add(request(1, 6, 100));
  std::vector<SequenceUpdate> last;
  while (s.has_work()) last = answer(s, *s.plan_step(), 1);
  REQUIRE(last.size() == 1);
  CHECK(last[0].finish == Finish::length);
}

TEST_CASE("cancel removes queued requests at once and running ones after their step", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({1, 64, 4, 512, 0}), blocks);
  s.add(request(1, 3, 10));
  s.add(request(2, 3, 10));
  auto plan = s.plan_step();
  auto queued = s.cancel(2);
  REQUIRE(queued);
  CHECK(queued->finish == Finish::cancelled);
  CHECK_FALSE(s.cancel(1).has_value());  // in flight
  auto updates = answer(s, *plan, 4);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].finish == Finish::cancelled);
  CHECK(blocks.num_free() == 16);
}

TEST_CASE("a failed step fails exactly the sequences in it", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({1, 64, 4, 512, 0}), blocks);
  s.add(request(1, 3, 10));
  s.add(request(2, 3, 10));
  s.plan_step();
  auto failed = s.on_step_failed("boom");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].id == 1);
  CHECK(failed[0].error_code == Errc::worker_failed);
  CHECK(s.num_waiting() == 1);
}

// --- planning ahead: the next step is planned before the previous one's result ----------------------------------

namespace {

// A plan's contents copied out (a plan's spans are valid only until the next plan_step).
struct Planned {
  uint64_t seq_id;
  int start_pos, num_tokens;
  int32_t from_previous;
  uint32_t sample_index;
  bool sample, new_sequence;
};
std::vector<Planned> copy_of(const StepPlan& plan) {
  std::vector<Planned> out;
  for (const auto& s : plan.slices)
    out.push_back({s.seq_id, s.start_pos, s.num_tokens, s.from_previous, s.sample_index, s.sample, s.new_sequence});
  return out;
}
std::vector<SequenceUpdate> answer_slices(BatchScheduler& s, const std::vector<Planned>& slices, int32_t token) {
  std::vector<StepSample> sampled;
  for (const auto& slice : slices)
    if (slice.sample) sampled.push_back(StepSample{slice.seq_id, token, std::nullopt});
  const auto updates = s.on_step_result(sampled);
  return {updates.begin(), updates.end()};
}

}  // namespace

TEST_CASE("plan ahead - a decode slice feeds the token the step in flight samples", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({8, 64, 4, 512, 0}), blocks);
  s.add(request(1, 6, 4));
  auto a = copy_of(*s.plan_step());
  REQUIRE(a.size() == 1);
  CHECK(a[0].new_sequence);
  auto b_plan = s.plan_step();  // ahead of a
  REQUIRE(b_plan);
  CHECK(b_plan->planned_ahead);
  auto b = copy_of(*b_plan);
  REQUIRE(b.size() == 1);
  CHECK(b[0].from_previous == 0);
  CHECK(b[0].start_pos == 6);
  CHECK(b[0].num_tokens == 1);
  CHECK(b[0].sample_index == 1);
  CHECK_FALSE(b[0].new_sequence);
  CHECK(b_plan->decode_only());
  CHECK(s.steps_in_flight() == 2);
  CHECK_FALSE(s.plan_step());  // two in flight at most

  auto updates = answer_slices(s, a, 99);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{99});
  auto c = copy_of(*s.plan_step());  // ahead of b
  CHECK(c[0].start_pos == 7);
  CHECK(c[0].sample_index == 2);
  answer_slices(s, b, 98);
  auto d = copy_of(*s.plan_step());  // ahead of c: generates the 4th and last token
  CHECK(d[0].sample_index == 3);
  answer_slices(s, c, 97);
  CHECK_FALSE(s.plan_step());  // known to end by length in d: nothing planned after it
  updates = answer_slices(s, d, 96);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].finish == Finish::length);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{96});
  CHECK(blocks.num_free() == 16);
  CHECK_FALSE(s.has_work());
}

TEST_CASE("plan ahead - a stop id ends the sequence - the slice planned after it is dropped", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({8, 64, 4, 512, 0}), blocks);
  s.add(request(1, 3, 100, {2}));
  auto a = copy_of(*s.plan_step());
  auto b = copy_of(*s.plan_step());
  auto updates = answer_slices(s, a, 2);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].finish == Finish::stop);
  CHECK(blocks.num_free() < 16);  // b still writes its KV
  CHECK_FALSE(s.has_work());
  CHECK_FALSE(s.plan_step());
  CHECK(answer_slices(s, b, 5).empty());  // the token sampled after the end is never reported
  CHECK(blocks.num_free() == 16);
  // The worker hears of it with the next step.
  s.add(request(2, 3, 1));
  auto next = s.plan_step();
  REQUIRE(next);
  CHECK(next->released == std::vector<uint64_t>{1});
}

TEST_CASE("plan ahead - a preemption waits for the step in flight", "[scheduler]") {
  BlockAllocator blocks(3);  // block_size 2: 6 token slots
  BatchScheduler s(plain({8, 64, 2, 512, 0}), blocks);
  s.add(request(1, 2, 10));
  s.add(request(2, 2, 10));
  auto a = copy_of(*s.plan_step());
  REQUIRE(a.size() == 2);
  // Both need a second block for position 2, one is free: planning ahead would have to preempt.
  CHECK_FALSE(s.plan_step());
  CHECK(s.num_preemptions() == 0);
  answer_slices(s, a, 5);
  auto b_plan = s.plan_step();  // no step in flight: preempts seq 2
  REQUIRE(b_plan);
  CHECK_FALSE(b_plan->planned_ahead);
  REQUIRE(b_plan->slices.size() == 1);
  CHECK(b_plan->slices[0].seq_id == 1);
  CHECK(b_plan->released == std::vector<uint64_t>{2});  // the worker forgets it; it comes back as new
  CHECK(s.num_preemptions() == 1);
}

TEST_CASE("plan ahead - cancel with two steps in flight", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({8, 64, 4, 512, 0}), blocks);
  s.add(request(1, 3, 10));
  auto a = copy_of(*s.plan_step());
  auto b = copy_of(*s.plan_step());
  CHECK_FALSE(s.cancel(1).has_value());
  auto updates = answer_slices(s, a, 4);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].finish == Finish::cancelled);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{4});
  CHECK_FALSE(s.cancel(1).has_value());
  CHECK(answer_slices(s, b, 4).empty());
  CHECK(blocks.num_free() == 16);
}

TEST_CASE("plan ahead - a failed step fails its sequences once - the step after it is dropped", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({8, 64, 4, 512, 0}), blocks);
  s.add(request(1, 3, 10));
  s.plan_step();
  s.plan_step();
  auto failed = s.on_step_failed("boom");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].finish == Finish::error);
  CHECK(s.on_step_failed("the previous step failed").empty());
  CHECK(blocks.num_free() == 16);
  CHECK(s.steps_in_flight() == 0);
}

TEST_CASE("plan ahead - chunked prefill continues ahead with known tokens", "[scheduler]") {
  BlockAllocator blocks(64);
  BatchScheduler s(plain({8, 16, 4, 512, 0}), blocks);
  s.add(request(1, 40, 2));
  auto a = copy_of(*s.plan_step());
  auto b = copy_of(*s.plan_step());
  CHECK(a[0].num_tokens == 16);
  CHECK_FALSE(a[0].sample);
  CHECK(b[0].start_pos == 16);
  CHECK(b[0].num_tokens == 16);
  CHECK(b[0].from_previous == -1);
  CHECK_FALSE(b[0].new_sequence);
}

TEST_CASE("sampling options are checked when a request is added", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s(plain({8, 64, 4, 512, 100}), blocks);
  auto bad = [&](auto edit) {
    auto r = request(1, 3, 4);
    edit(r.sampling);
    auto refused = s.add(r);
    REQUIRE(refused);
    CHECK(refused->error_code == Errc::invalid_argument);
    return refused->error;
  };
  CHECK(bad([](SamplingOptions& o) { o.top_p = 0; }) == "top_p: must be in (0, 1], got 0");
  CHECK(bad([](SamplingOptions& o) { o.temperature = -1; }) == "temperature: must be finite and >= 0, got -1");
  CHECK(bad([](SamplingOptions& o) { o.top_k = 101; }) ==
        "top_k: must be at most the vocabulary size (100), got 101");
  CHECK(bad([](SamplingOptions& o) { o.logprobs = 21; }) == "logprobs: must be at most 20 (or -1 for none), got 21");
  CHECK_FALSE(s.has_work());
}

TEST_CASE("lease - a short plan asks for blocks, a grant lets it continue, a surplus is given back", "[scheduler][lease]") {
  BlockAllocator lease(2);  // block_size 4: 8 slots leased out of a pool of 64 blocks
  SchedulerLimits limits{8, 64, 4, 512, 0};
  limits.pool_blocks = 64;
  limits.lease_reserve = 2;
  BatchScheduler s(one_at_a_time(limits), lease);
  s.add(request(1, 6, 20));    // 2 blocks: fits
  s.add(request(2, 10, 20));   // 3 blocks: does not fit the lease, fits the pool (not refused)
  auto plan = s.plan_step();
  REQUIRE(plan->slices.size() == 1);
  CHECK(s.blocks_wanted() == 3);
  s.set_lease_growing(true);   // the actor asked the kv_pool
  answer(s, *plan, 5);
  // Seq 1 decodes on within its 2 blocks; seq 2 still waits; at position 8 seq 1 needs a third block and stalls
  // (no preemption while a grant is on its way).
  int decoded = 0;
  while ((plan = s.plan_step()) != nullptr) {
    REQUIRE(plan->slices.size() == 1);
    answer(s, *plan, 5);
    REQUIRE(++decoded < 10);
  }
  CHECK(decoded == 2);  // positions 6 and 7
  CHECK(s.num_preemptions() == 0);
  CHECK(s.blocks_wanted() > 0);
  std::vector<uint32_t> grant{10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  lease.add(grant);
  s.set_lease_growing(false);
  plan = s.plan_step();
  REQUIRE(plan->slices.size() == 2);
  CHECK(s.blocks_wanted() == 0);
  CHECK(s.blocks_spare() == 0);  // running sequences keep their share
  answer(s, *plan, 5);
  while (s.has_work()) answer(s, *s.plan_step(), 5);
  CHECK(s.blocks_spare() == 12 - 2);  // nothing runs: all but the reserve goes back
  auto back = lease.take_free(s.blocks_spare());
  CHECK(back.size() == 10);
  CHECK(lease.num_total() == 2);
}

TEST_CASE("prefix cache - a shared prompt is computed once - later requests start after it", "[scheduler][prefix_cache]") {
  BlockAllocator blocks(32);
  SchedulerLimits limits{8, 128, 4, 512, 0};
  limits.plan_ahead = false;
  BatchScheduler s(limits, blocks);
  s.add(request(1, 14, 2));  // blocks: [10..13] [14..17] [18..21] [22,23]
  auto plan = s.plan_step();
  CHECK(plan->num_tokens == 14);
  answer(s, *plan, 5);       // the three full blocks are cached now
  s.add(request(2, 14, 2));  // the same prompt
  s.add(request(3, 9, 2));   // its first two blocks
  plan = s.plan_step();
  REQUIRE(plan->slices.size() == 3);
  CHECK(plan->slices[1].start_pos == 12);  // 3 cached blocks; the last 2 tokens computed
  CHECK(plan->slices[1].num_tokens == 2);
  CHECK(plan->slices[2].start_pos == 8);   // 2 blocks; its last token always computed (its logits are needed)
  CHECK(plan->slices[2].num_tokens == 1);
  CHECK(plan->slices[1].new_sequence);
  CHECK(plan->slices[1].block_table[0] == plan->slices[0].block_table[0]);  // shared, not copied
  auto stats = s.prefix_cache_stats();
  CHECK(stats.hit_blocks == 5);
  answer(s, *plan, 5);
  while (s.has_work()) answer(s, *s.plan_step(), 5);
  // Everything finished: the blocks are either free or cached and evictable; none is held.
  CHECK(blocks.num_free() + s.prefix_cache_stats().cached_blocks == 32);
  // A request with another prompt that needs nearly the whole pool evicts the cached blocks.
  auto big = request(4, 120, 1);
  big.prompt[0] = 99;
  s.add(big);
  REQUIRE(s.plan_step());
  CHECK(s.prefix_cache_stats().evictions > 0);
}

namespace {

SchedulerLimits swapping(SchedulerLimits limits, uint32_t swap_blocks) {
  limits.preemption_mode = PreemptionMode::swap;
  limits.swap_blocks = swap_blocks;
  return plain(limits);
}

}  // namespace

TEST_CASE("swap - the victim's computed blocks go to host memory and come back before it continues",
          "[scheduler][swap]") {
  BlockAllocator blocks(3);  // block_size 2: 6 token slots
  BatchScheduler s(swapping({8, 64, 2, 512, 0}, 4), blocks);
  s.add(request(1, 2, 10));
  s.add(request(2, 2, 10));
  auto plan = s.plan_step();
  REQUIRE(plan->slices.size() == 2);
  const uint32_t seq2_block = plan->slices[1].block_table[0];
  answer(s, *plan, 5);
  // Both need a second block; seq 2 (newest) is swapped out: the next step copies its one computed block out first.
  plan = s.plan_step();
  REQUIRE(plan->slices.size() == 1);
  CHECK(plan->slices[0].seq_id == 1);
  CHECK(s.num_preemptions() == 1);
  CHECK(s.num_swap_outs() == 1);
  REQUIRE(plan->swap_out.size() == 1);
  CHECK(plan->swap_out[0].src == seq2_block);
  const uint32_t host_block = plan->swap_out[0].dst;
  CHECK(plan->released == std::vector<uint64_t>{2});  // the worker forgets it; it comes back as a new sequence
  CHECK(s.swapped_blocks() == 1);
  answer(s, *plan, 6);
  // Run seq 1 to the end; seq 2 comes back: its block is copied in and only its sampled token is computed.
  std::optional<PlannedSlice> back;
  std::vector<BlockCopy> swap_in;
  while (s.has_work() && !back) {
    plan = s.plan_step();
    REQUIRE(plan);
    CHECK(plan->swap_out.empty());
    for (const auto& slice : plan->slices)
      if (slice.seq_id == 2) {
        back = slice;
        swap_in = plan->swap_in;
      }
    if (!back) answer(s, *plan, 6);
  }
  REQUIRE(back);
  CHECK(back->new_sequence);
  CHECK(back->start_pos == 2);
  CHECK(std::vector<int32_t>(back->tokens.begin(), back->tokens.end()) == std::vector<int32_t>{5});
  REQUIRE(swap_in.size() == 1);
  CHECK(swap_in[0].src == host_block);
  CHECK(swap_in[0].dst == back->block_table[0]);
  CHECK(s.num_swap_ins() == 1);
  CHECK(s.swapped_blocks() == 0);
  CHECK(s.num_preemptions() == 1);  // nothing was recomputed
}

TEST_CASE("swap - a swapped-out sequence holds KV in host memory: take_unstarted keeps it, take_waiting gives it back",
          "[scheduler][swap][hand_back]") {
  BlockAllocator blocks(3);  // block_size 2
  BatchScheduler s(swapping({8, 64, 2, 512, 0}, 4), blocks);
  s.add(request(1, 2, 10));
  s.add(request(2, 2, 10));
  auto plan = s.plan_step();
  REQUIRE(plan->slices.size() == 2);
  answer(s, *plan, 5);
  plan = s.plan_step();  // seq 2 is swapped out
  REQUIRE(plan);
  REQUIRE(s.num_swapped() == 1);
  answer(s, *plan, 6);
  CHECK(s.take_unstarted().requests.empty());
  CHECK(s.num_swapped() == 1);
  HandBack back = s.take_waiting();
  REQUIRE(back.requests.size() == 1);
  CHECK(back.requests[0].id == 2);
  CHECK(back.requests[0].resumed == std::vector<int32_t>{5});
  CHECK(s.swapped_blocks() == 0);
}

TEST_CASE("swap - without room in the swap space the victim is recomputed", "[scheduler][swap]") {
  BlockAllocator blocks(3);  // block_size 2
  BatchScheduler s(swapping({8, 64, 2, 512, 0}, 1), blocks);
  s.add(request(1, 1, 10));
  s.add(request(2, 3, 10));  // 2 blocks computed when it is preempted: more than the one host block
  answer(s, *s.plan_step(), 5);  // 1 + 2 blocks
  answer(s, *s.plan_step(), 5);  // positions 1 and 3: no new block
  auto plan = s.plan_step();     // seq 1 needs a block at position 2: seq 2 makes room, by recompute
  REQUIRE(plan->slices.size() == 1);
  CHECK(s.num_preemptions() == 1);
  CHECK(s.num_swap_outs() == 0);
  CHECK(plan->swap_out.empty());
  answer(s, *plan, 5);
  std::optional<PlannedSlice> back;
  while (s.has_work() && !back) {
    plan = s.plan_step();
    REQUIRE(plan);
    CHECK(plan->swap_in.empty());
    for (const auto& slice : plan->slices)
      if (slice.seq_id == 2) back = slice;
    if (!back) answer(s, *plan, 5);
  }
  REQUIRE(back);
  CHECK(back->start_pos == 0);  // its prompt and generated tokens are computed again
  CHECK(back->num_tokens == 5);
}

TEST_CASE("swap - cancelling a swapped-out sequence frees its host blocks", "[scheduler][swap]") {
  BlockAllocator blocks(3);
  BatchScheduler s(swapping({8, 64, 2, 512, 0}, 4), blocks);
  s.add(request(1, 2, 10));
  s.add(request(2, 2, 10));
  answer(s, *s.plan_step(), 5);
  auto plan = s.plan_step();
  REQUIRE(s.swapped_blocks() == 1);
  auto cancelled = s.cancel(2);
  REQUIRE(cancelled);
  CHECK(cancelled->finish == Finish::cancelled);
  CHECK(s.swapped_blocks() == 0);
  answer(s, *plan, 5);
}

namespace {

SequenceRequest samples_of(SequenceRequest r, uint32_t n) {
  r.sampling.n = n;
  r.sampling.seed = 40;
  return r;
}

const PlannedSlice* slice_of(const StepPlan& plan, uint64_t id) {
  for (const auto& s : plan.slices)
    if (s.seq_id == id) return &s;
  return nullptr;
}

}  // namespace

TEST_CASE("n samples - the prompt is computed once - the samples fork at the first token and copy the partial block",
          "[scheduler][fork]") {
  BlockAllocator blocks(16);
  BatchScheduler s(one_at_a_time({8, 64, 2, 512, 0}), blocks);
  REQUIRE_FALSE(s.add(samples_of(request(10, 5, 4), 3)));  // 5 tokens: 2 full blocks and a partial one
  auto plan = s.plan_step();
  REQUIRE(plan->slices.size() == 1);
  CHECK(plan->slices[0].forks == 3);
  CHECK(plan->num_samples == 3);
  const std::vector<uint32_t> prompt_blocks(plan->slices[0].block_table.begin(), plan->slices[0].block_table.end());
  REQUIRE(prompt_blocks.size() == 3);
  CHECK(blocks.num_free() == 13);
  auto updates = answer(s, *plan, 70);  // samples 10, 11, 12 draw 70, 71, 72
  REQUIRE(updates.size() == 3);
  std::map<uint64_t, std::vector<int32_t>> first;
  for (const auto& u : updates) first[u.id] = u.new_tokens;
  CHECK(first == std::map<uint64_t, std::vector<int32_t>>{{10, {70}}, {11, {71}}, {12, {72}}});
  CHECK(blocks.num_free() == 11);  // the two forks took one block each for their copy of the partial block

  plan = s.plan_step();
  REQUIRE(plan->slices.size() == 3);
  // The copies come first in the step, before sample 10 writes position 5 into its partial block.
  REQUIRE(plan->copies.size() == 2);
  for (uint64_t id : {11, 12}) {
    const PlannedSlice* fork = slice_of(*plan, id);
    REQUIRE(fork);
    CHECK(fork->new_sequence);
    CHECK(fork->start_pos == 5);
    CHECK(fork->sample_index == 1);
    CHECK(fork->request->sampling.seed == 40 + (id - 10));
    CHECK(fork->request->sampling.n == 1);
    CHECK(std::vector<int32_t>(fork->tokens.begin(), fork->tokens.end()) == std::vector<int32_t>{int32_t(70 + id - 10)});
    REQUIRE(fork->block_table.size() == 3);
    CHECK(fork->block_table[0] == prompt_blocks[0]);  // shared
    CHECK(fork->block_table[1] == prompt_blocks[1]);
    CHECK(fork->block_table[2] != prompt_blocks[2]);  // its own copy
    CHECK(std::count(plan->copies.begin(), plan->copies.end(), BlockCopy{prompt_blocks[2], fork->block_table[2]}) == 1);
  }
  CHECK(slice_of(*plan, 10)->forks == 0);
  CHECK(std::vector<uint32_t>(slice_of(*plan, 10)->block_table.begin(), slice_of(*plan, 10)->block_table.end()) ==
        prompt_blocks);
  answer(s, *plan, 5);
  while (s.has_work()) answer(s, *s.plan_step(), 5);
  CHECK(blocks.num_free() == 16);  // shared blocks freed once, by the last holder
}

TEST_CASE("n samples - seats of max_num_seqs are held from admission - n above it is refused", "[scheduler][fork]") {
  BlockAllocator blocks(32);
  BatchScheduler s(one_at_a_time({4, 64, 4, 512, 0}), blocks);
  auto refused = s.add(samples_of(request(1, 3, 4), 5));
  REQUIRE(refused);
  CHECK(refused->error == "n: must be at most engine.max_num_seqs (4): the samples run together, got 5");
  CHECK(refused->unforked_samples == 4);  // every sample gets its final update
  REQUIRE_FALSE(s.add(samples_of(request(10, 3, 4), 3)));
  REQUIRE_FALSE(s.add(request(20, 3, 4)));
  REQUIRE_FALSE(s.add(request(21, 3, 4)));
  auto plan = s.plan_step();
  CHECK(plan->slices.size() == 2);  // 10 holds three seats, 20 the fourth; 21 waits
  CHECK(slice_of(*plan, 21) == nullptr);
  // Ids of samples not forked yet are taken.
  auto clash = s.add(request(11, 3, 4));
  REQUIRE(clash);
  CHECK(clash->error == "request id 11 is already in use");
  CHECK(clash->unforked_samples == 0);
  answer(s, *plan, 70);
  plan = s.plan_step();
  CHECK(plan->slices.size() == 4);  // the three samples and 20: still full
  CHECK(slice_of(*plan, 21) == nullptr);
}

TEST_CASE("n samples - cancelled before the fork - every sample ends", "[scheduler][fork]") {
  BlockAllocator blocks(32);
  BatchScheduler s(one_at_a_time({8, 64, 4, 512, 0}), blocks);
  REQUIRE_FALSE(s.add(samples_of(request(10, 3, 4), 4)));
  auto cancelled = s.cancel(10);
  REQUIRE(cancelled);
  CHECK(cancelled->finish == Finish::cancelled);
  CHECK(cancelled->unforked_samples == 3);
  CHECK_FALSE(s.has_work());
  REQUIRE_FALSE(s.add(request(11, 3, 4)));  // the ids are free again
}

TEST_CASE("n samples - max_tokens 1 ends every sample at the fork - prompts on a block boundary copy nothing",
          "[scheduler][fork]") {
  BlockAllocator blocks(16);
  BatchScheduler s(one_at_a_time({8, 64, 2, 512, 0}), blocks);
  REQUIRE_FALSE(s.add(samples_of(request(10, 4, 1), 3)));
  auto updates = answer(s, *s.plan_step(), 70);
  REQUIRE(updates.size() == 3);
  for (const auto& u : updates) CHECK(u.finish == Finish::length);
  CHECK_FALSE(s.has_work());
  CHECK(blocks.num_free() == 16);

  REQUIRE_FALSE(s.add(samples_of(request(20, 4, 3), 2)));
  answer(s, *s.plan_step(), 70);
  auto plan = s.plan_step();
  CHECK(plan->copies.empty());  // 4 tokens: two full blocks, shared; each sample's next token opens its own block
  REQUIRE(plan->slices.size() == 2);
  CHECK(plan->slices[0].block_table.size() == 3);
  CHECK(plan->slices[1].block_table.size() == 3);
  CHECK(plan->slices[0].block_table[2] != plan->slices[1].block_table[2]);
  answer(s, *plan, 5);
  while (s.has_work()) answer(s, *s.plan_step(), 5);
  CHECK(blocks.num_free() == 16);
}

TEST_CASE("n samples - planned ahead - the fork is not planned past and later slots stay aligned",
          "[scheduler][fork]") {
  BlockAllocator blocks(32);
  BatchScheduler s(plain({8, 64, 4, 512, 0}), blocks);
  REQUIRE_FALSE(s.add(request(1, 3, 8)));
  answer(s, *s.plan_step(), 50);
  REQUIRE_FALSE(s.add(samples_of(request(10, 3, 8), 3)));
  auto first = s.plan_step();  // 1 decodes, 10 prefills and forks
  REQUIRE(first->slices.size() == 2);
  CHECK(first->num_samples == 4);
  auto ahead = s.plan_step();  // planned ahead: 1 only (from the first step's slot 0); 10 waits for its forks
  REQUIRE(ahead);
  REQUIRE(ahead->slices.size() == 1);
  CHECK(ahead->slices[0].seq_id == 1);
  CHECK(ahead->slices[0].from_previous == 0);
  answer(s, *first, 60);
  auto after = s.plan_step();
  REQUIRE(after);
  CHECK(after->slices.size() == 4);  // 1 again (planned past the step in flight) and the three samples of 10
  CHECK(slice_of(*after, 1)->from_previous == 0);
  for (uint64_t id : {10, 11, 12}) CHECK(slice_of(*after, id)->from_previous == -1);
  CHECK(slice_of(*after, 11)->new_sequence);
  answer(s, *ahead, 61);
  auto next = s.plan_step();
  REQUIRE(next);
  // The step in flight holds samples 10 (slot 1), 11 and 12 after 1 (slot 0): 1's next token is slot 0's.
  CHECK(slice_of(*next, 1)->from_previous == 0);
  CHECK(slice_of(*next, 12)->from_previous == 3);
}

TEST_CASE("prefix cache - a waiting request that does not fit holds none of the cached blocks it matched",
          "[scheduler][prefix_cache]") {
  BlockAllocator blocks(4);  // block_size 2: 8 token slots
  SchedulerLimits limits{8, 64, 2, 512, 0};
  limits.plan_ahead = false;
  BatchScheduler s(limits, blocks);
  s.add(request(1, 4, 1));  // [10,11] [12,13]: cached once it is done
  answer(s, *s.plan_step(), 5);
  REQUIRE_FALSE(s.has_work());
  SequenceRequest running = request(2, 1, 10);
  running.prompt = {50};
  s.add(running);
  s.add(request(3, 7, 4));  // matches the two cached blocks, needs two more than there are while 2 runs
  // 2 grows to the whole pool: the blocks 3 matched and could not use stay evictable, so 2 never preempts.
  while (s.has_work() && s.num_running() <= 1) {
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan);
    answer(s, *plan, 7);
    if (s.num_running() == 0) break;
  }
  CHECK(s.num_preemptions() == 0);
  while (s.has_work()) answer(s, *s.plan_step(), 7);
  CHECK(s.num_preemptions() == 0);
  CHECK(blocks.num_free() + s.prefix_cache_stats().cached_blocks == 4);
}
