// Hand-back of sequences between data parallel replicas, scripted: a lost worker's sequences leave as
// continuations with the tokens reported so far, a draining replica gives back only what it has not started, and a
// continuation goes on where it stopped (same sample indices, same budget, nothing reported twice).
#include <catch2/catch.hpp>

#include "scheduler/batch_scheduler.hpp"
#include "scheduler_test_util.hpp"

using namespace actord;
using test::answer;
using test::request;

namespace {

SchedulerLimits limits(bool plan_ahead) {
  SchedulerLimits l{8, 64, 4, 512, 0};
  l.plan_ahead = plan_ahead;
  l.enable_prefix_caching = false;
  return l;
}

std::vector<int32_t> tokens_of(const PlannedSlice& s) { return {s.tokens.begin(), s.tokens.end()}; }

}  // namespace

TEST_CASE("take_all - continuations carry the reported tokens - steps in flight are forgotten", "[scheduler][hand_back]") {
  BlockAllocator blocks(32);
  BatchScheduler s(limits(true), blocks);
  s.add(request(1, 5, 10));
  s.add(request(2, 3, 10));
  const StepPlan* plan = s.plan_step();
  REQUIRE(plan);
  answer(s, *plan, 70);                   // both sampled 70: reported
  REQUIRE(s.plan_step());                 // one step in flight (its tokens never come back)...
  REQUIRE(s.plan_step());                 // ...and one planned ahead of it
  CHECK(s.steps_in_flight() == 2);

  HandBack back = s.take_all();
  REQUIRE(back.requests.size() == 2);
  CHECK(back.cancelled.empty());
  CHECK(back.requests[0].id == 1);        // in arrival order
  CHECK(back.requests[0].resumed == std::vector<int32_t>{70});
  CHECK(back.requests[0].prompt == request(1, 5, 10).prompt);
  CHECK(back.requests[1].id == 2);
  CHECK(back.requests[1].resumed == std::vector<int32_t>{70});
  CHECK(s.steps_in_flight() == 0);
  CHECK_FALSE(s.has_work());
  CHECK(s.outstanding_tokens() == 0);
  CHECK(blocks.num_free() == 32);         // every block back in the lease
  CHECK_FALSE(s.plan_step());
  // The ids are free again: the same requests may come back here.
  CHECK_FALSE(s.add(back.requests[0]).has_value());
}

TEST_CASE("a continuation recomputes prompt and resumed tokens, then samples at the next index", "[scheduler][hand_back]") {
  BlockAllocator blocks(32);
  BatchScheduler s(limits(false), blocks);
  SequenceRequest r = request(7, 3, 4);
  r.resumed = {50, 51};
  REQUIRE_FALSE(s.add(r).has_value());
  CHECK(s.outstanding_tokens() == 5 + 2);  // 5 tokens to compute, 2 left to generate
  const StepPlan* plan = s.plan_step();
  REQUIRE(plan);
  REQUIRE(plan->slices.size() == 1);
  CHECK(tokens_of(plan->slices[0]) == std::vector<int32_t>{10, 11, 12, 50, 51});
  CHECK(plan->slices[0].new_sequence);
  CHECK(plan->slices[0].sample_index == 2);
  CHECK(plan->num_prefill_tokens == 5);
  auto updates = answer(s, *plan, 52);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{52});  // only the new token is reported
  CHECK(updates[0].prompt_tokens == 3);
  plan = s.plan_step();
  REQUIRE(plan);
  CHECK(plan->slices[0].sample_index == 3);
  updates = answer(s, *plan, 53);
  CHECK(updates[0].finish == Finish::length);  // 2 resumed + 2 new = max_tokens 4
}

TEST_CASE("a continuation never asks again for prompt logprobs it reported", "[scheduler][hand_back]") {
  BlockAllocator blocks(32);
  BatchScheduler s(limits(false), blocks);
  SequenceRequest r = request(3, 6, 4);
  r.sampling.prompt_logprobs = 0;
  r.resumed = {40};
  s.add(r);
  const StepPlan* plan = s.plan_step();
  REQUIRE(plan);
  CHECK(plan->slices[0].prompt_logprobs_from == -1);

  SequenceRequest partial = request(4, 6, 4);
  partial.sampling.prompt_logprobs = 0;
  partial.prompt_logprobs_reported = 4;  // positions 1..3 reported before the hand-back
  BatchScheduler t(limits(false), blocks);
  t.add(partial);
  plan = t.plan_step();
  REQUIRE(plan);
  CHECK(plan->slices[0].prompt_logprobs_from == 4);
}

TEST_CASE("take_waiting - a draining replica keeps its running sequences and gives back the rest", "[scheduler][hand_back]") {
  BlockAllocator blocks(32);
  SchedulerLimits l = limits(false);
  l.max_num_seqs = 1;
  BatchScheduler s(l, blocks);
  s.add(request(1, 3, 2));
  s.add(request(2, 3, 2));
  const StepPlan* plan = s.plan_step();
  REQUIRE(plan);
  REQUIRE(plan->slices.size() == 1);      // only 1 runs: max_num_seqs 1
  HandBack back = s.take_waiting();
  REQUIRE(back.requests.size() == 1);
  CHECK(back.requests[0].id == 2);
  CHECK(back.requests[0].resumed.empty());
  answer(s, *plan, 60);
  plan = s.plan_step();
  REQUIRE(plan);
  auto updates = answer(s, *plan, 61);
  CHECK(updates[0].id == 1);
  CHECK(updates[0].finish == Finish::length);
  CHECK_FALSE(s.has_work());
  CHECK(blocks.num_free() == 32);
}

TEST_CASE("take_unstarted - a replica joined the group: the waiting sequences without KV leave in arrival "
          "order - the running ones stay", "[scheduler][hand_back]") {
  BlockAllocator blocks(32);
  SchedulerLimits l = limits(false);
  l.max_num_seqs = 1;
  BatchScheduler s(l, blocks);
  s.add(request(1, 3, 2));
  s.add(request(2, 3, 2));
  s.add(request(3, 4, 2));
  const StepPlan* plan = s.plan_step();
  REQUIRE(plan);
  REQUIRE(plan->slices.size() == 1);  // only 1 runs: max_num_seqs 1
  HandBack back = s.take_unstarted();
  REQUIRE(back.requests.size() == 2);
  CHECK(back.requests[0].id == 2);
  CHECK(back.requests[1].id == 3);
  CHECK(back.requests[1].prompt.size() == 4);
  CHECK(back.requests[0].resumed.empty());
  CHECK(s.num_waiting() == 0);
  CHECK(s.take_unstarted().requests.empty());  // nothing left to give
  answer(s, *plan, 60);
  plan = s.plan_step();
  REQUIRE(plan);
  auto updates = answer(s, *plan, 61);
  CHECK(updates[0].id == 1);
  CHECK(updates[0].finish == Finish::length);
  CHECK_FALSE(s.has_work());
  CHECK(blocks.num_free() == 32);
}

TEST_CASE("take_all - a sequence cancelled while its step was in flight ends cancelled, not handed back",
          "[scheduler][hand_back]") {
  BlockAllocator blocks(32);
  BatchScheduler s(limits(false), blocks);
  s.add(request(1, 3, 5));
  REQUIRE(s.plan_step());
  CHECK_FALSE(s.cancel(1).has_value());   // carried by the step in flight: cancelled when it returns
  HandBack back = s.take_all();
  CHECK(back.requests.empty());
  REQUIRE(back.cancelled.size() == 1);
  CHECK(back.cancelled[0].id == 1);
  CHECK(back.cancelled[0].finish == Finish::cancelled);
}

TEST_CASE("n samples - unforked requests go back whole, forked samples one by one", "[scheduler][hand_back][fork]") {
  BlockAllocator blocks(32);
  BatchScheduler s(limits(false), blocks);
  SequenceRequest r = request(10, 3, 5);
  r.sampling.n = 3;
  r.sampling.temperature = 1;
  r.sampling.seed = 100;
  s.add(r);
  HandBack early = s.take_all();
  REQUIRE(early.requests.size() == 1);
  CHECK(early.requests[0].sampling.n == 3);
  CHECK(early.requests[0].resumed.empty());

  s.add(r);
  const StepPlan* plan = s.plan_step();
  REQUIRE(plan);
  answer(s, *plan, 80);                   // samples 10, 11, 12 take 80, 81, 82
  HandBack back = s.take_all();
  REQUIRE(back.requests.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(back.requests[i].id == 10u + uint64_t(i));
    CHECK(back.requests[i].sampling.n == 1);
    CHECK(back.requests[i].sampling.seed == 100u + uint64_t(i));
    CHECK(back.requests[i].resumed == std::vector<int32_t>{80 + i});
  }
}

TEST_CASE("continuations that cannot continue are refused with a reason", "[scheduler][hand_back]") {
  BlockAllocator blocks(32);
  BatchScheduler s(limits(false), blocks);
  SequenceRequest done = request(1, 3, 2);
  done.resumed = {5, 6};
  auto refused = s.add(done);
  REQUIRE(refused);
  CHECK(refused->error.find("nothing is left") != std::string::npos);
  SequenceRequest forked = request(2, 3, 4);
  forked.sampling.n = 2;
  forked.resumed = {5};
  refused = s.add(forked);
  REQUIRE(refused);
  CHECK(refused->error.find("one sample") != std::string::npos);
  SequenceRequest bad = request(3, 3, 4);
  bad.resumed = {-2};
  refused = s.add(bad);
  REQUIRE(refused);
  CHECK(refused->error.find("resumed token id -2") != std::string::npos);
}

TEST_CASE("prefill_backlog - the prompt tokens still to prefill, chunk by chunk, none once decoding, all of a "
          "continuation", "[scheduler][hand_back][autoscale]") {
  BlockAllocator blocks(32);
  SchedulerLimits l = limits(false);
  l.max_num_batched_tokens = 4;
  BatchScheduler s(l, blocks);
  s.add(request(1, 10, 3));
  CHECK(s.prefill_backlog() == 10);
  const StepPlan* plan = s.plan_step();  // a chunk of 4 (counted once a step carries it)
  REQUIRE(plan);
  CHECK(s.prefill_backlog() == 6);
  answer(s, *plan, 70);
  plan = s.plan_step();
  REQUIRE(plan);
  answer(s, *plan, 70);
  CHECK(s.prefill_backlog() == 2);
  plan = s.plan_step();  // the last 2, and the first sample
  REQUIRE(plan);
  answer(s, *plan, 71);
  CHECK(s.prefill_backlog() == 0);  // decoding: one token a step is not a backlog
  plan = s.plan_step();
  REQUIRE(plan);
  CHECK(s.prefill_backlog() == 0);
  // A continuation prefills its prompt and the tokens it generated elsewhere again.
  SequenceRequest r = request(7, 3, 4);
  r.resumed = {50, 51};
  REQUIRE_FALSE(s.add(r).has_value());
  CHECK(s.prefill_backlog() == 5);
}
