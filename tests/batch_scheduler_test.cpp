// Continuous batching, scripted step by step: what runs, chunking, preemption, finishing, refusals.
#include <catch2/catch.hpp>

#include "scheduler/batch_scheduler.hpp"

using namespace actord;

namespace {

SequenceRequest request(uint64_t id, int prompt_len, uint32_t max_tokens, std::vector<int32_t> stop = {}) {
  SequenceRequest r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(10 + i);
  r.max_tokens = max_tokens;
  r.stop_ids = std::move(stop);
  return r;
}

// Answers every sampling slice of the plan with `token`.
std::vector<SequenceUpdate> answer(BatchScheduler& s, const StepPlan& plan, int32_t token) {
  std::vector<std::pair<uint64_t, int32_t>> sampled;
  for (const auto& slice : plan.slices)
    if (slice.sample) sampled.emplace_back(slice.seq_id, token);
  return s.on_step_result(sampled);
}

}  // namespace

TEST_CASE("prefill then decode - one step in flight at a time", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s({8, 64, 4, 512, 0}, blocks);
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
  BatchScheduler s({8, 64, 4, 512, 0}, blocks);
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
  BatchScheduler s({8, 16, 4, 512, 0}, blocks);
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
  BatchScheduler s({2, 64, 4, 512, 0}, blocks);
  for (uint64_t id = 1; id <= 3; ++id) s.add(request(id, 2, 5));
  auto plan = s.plan_step();
  CHECK(plan->slices.size() == 2);
  CHECK(s.num_waiting() == 1);
}

TEST_CASE("stop ids finish a sequence and report the id", "[scheduler]") {
  BlockAllocator blocks(8);
  BatchScheduler s({8, 64, 4, 512, 0}, blocks);
  s.add(request(1, 3, 100, {2}));
  auto plan = s.plan_step();
  auto updates = answer(s, *plan, 2);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].finish == Finish::stop);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{2});
}

TEST_CASE("when blocks run out the newest sequence is preempted and recomputed later", "[scheduler]") {
  BlockAllocator blocks(3);  // block_size 2: 6 token slots
  BatchScheduler s({8, 64, 2, 512, 0}, blocks);
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
  BatchScheduler s({8, 64, 4, 32, 512}, blocks);
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
  BatchScheduler s({8, 64, 4, 8, 0}, blocks);
  s.add(request(1, 6, 100));
  std::vector<SequenceUpdate> last;
  while (s.has_work()) last = answer(s, *s.plan_step(), 1);
  REQUIRE(last.size() == 1);
  CHECK(last[0].finish == Finish::length);
}

TEST_CASE("cancel removes queued requests at once and running ones after their step", "[scheduler]") {
  BlockAllocator blocks(16);
  BatchScheduler s({1, 64, 4, 512, 0}, blocks);
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
  BatchScheduler s({1, 64, 4, 512, 0}, blocks);
  s.add(request(1, 3, 10));
  s.add(request(2, 3, 10));
  s.plan_step();
  auto failed = s.on_step_failed("boom");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].id == 1);
  CHECK(failed[0].error_code == Errc::worker_failed);
  CHECK(s.num_waiting() == 1);
}
