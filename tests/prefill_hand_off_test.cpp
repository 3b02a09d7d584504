// Prefill/decode disaggregation on a prefill replica's batcher (SchedulerLimits::hand_off_prefilled), scripted step
// by step: a sequence is never planned past its first sample, leaves the running list once that sample is back,
// and holds its blocks until it is released; what does not hand off (finished, forked, imported) decodes here.
#include <catch2/catch.hpp>

#include <algorithm>

#include "scheduler/batch_scheduler.hpp"
#include "scheduler_test_util.hpp"

using namespace actord;
using test::answer;
using test::request;

namespace {

SchedulerLimits prefill_replica() {
  SchedulerLimits limits{8, 16, 4, 512, 0};
  limits.enable_prefix_caching = false;
  limits.hand_off_prefilled = true;
  return limits;
}

bool carries(const StepPlan* plan, uint64_t id) {
  return plan && std::any_of(plan->slices.begin(), plan->slices.end(),
                             [&](const PlannedSlice& s) { return s.seq_id == id; });
}

}  // namespace

TEST_CASE("hand-off - a prefilled sequence leaves after its first token, with its KV positions, and keeps its "
          "blocks until released", "[scheduler][disaggregation]") {
  BlockAllocator blocks(32);
  BatchScheduler s(prefill_replica(), blocks);
  REQUIRE_FALSE(s.add(request(1, 6, 8)).has_value());   // one chunk
  REQUIRE_FALSE(s.add(request(2, 20, 8)).has_value());  // two chunks of the 16-token budget
  const StepPlan* first = s.plan_step();
  REQUIRE(first);
  CHECK(carries(first, 1));
  // Planned ahead of the first step: request 1 samples there, so it gets no decode slice; request 2 goes on.
  const StepPlan* second = s.plan_step();
  REQUIRE(second);
  CHECK_FALSE(carries(second, 1));
  CHECK(carries(second, 2));
  auto updates = answer(s, *first, 70);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].id == 1);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{70});  // reported here, before it leaves
  CHECK(updates[0].finish == Finish::none);
  auto off = s.take_handed_off();
  REQUIRE(off.size() == 1);
  CHECK(off[0].continuation.id == 1);
  CHECK(off[0].continuation.resumed == std::vector<int32_t>{70});
  CHECK(off[0].kv_tokens == 6);
  CHECK(s.take_handed_off().empty());  // given once
  CHECK(s.num_handing_off() == 1);
  CHECK(s.num_running() == 1);          // request 2 only
  const size_t free_while_leaving = blocks.num_free();
  // Cancels of a leaving sequence are the router's business (it ends the continuation).
  CHECK_FALSE(s.cancel(1).has_value());
  // Movable KV and outstanding tokens count it no more.
  for (const auto& [id, tokens] : s.movable_kv()) CHECK(id != 1);
  answer(s, *second, 71);
  REQUIRE(s.take_handed_off().size() == 1);  // request 2's prefill finished there
  s.release_handed_off(1);
  CHECK(blocks.num_free() == free_while_leaving + 2);  // its 2 blocks of 4
  s.release_handed_off(1);  // ignored: released already
  s.release_handed_off(2);
  CHECK(s.num_handing_off() == 0);
  CHECK_FALSE(s.has_work());
  CHECK(s.outstanding_tokens() == 0);
  CHECK(blocks.num_free() == 32);
  // The worker is told to forget both with the next step.
  REQUIRE_FALSE(s.add(request(3, 2, 2)).has_value());
  const StepPlan* third = s.plan_step();
  REQUIRE(third);
  CHECK(std::count(third->released.begin(), third->released.end(), 1u) == 1);
  CHECK(std::count(third->released.begin(), third->released.end(), 2u) == 1);
}

TEST_CASE("hand-off - what does not hand off: a sequence done at its first token, n > 1 samples, an import",
          "[scheduler][disaggregation]") {
  BlockAllocator blocks(64);
  BatchScheduler s(prefill_replica(), blocks);
  SECTION("max_tokens 1 finishes here") {
    s.add(request(1, 5, 1));
    auto updates = answer(s, *s.plan_step(), 40);
    REQUIRE(updates.size() == 1);
    CHECK(updates[0].finish == Finish::length);
    CHECK(s.take_handed_off().empty());
    CHECK(blocks.num_free() == 64);
  }
  SECTION("n = 2 forks at its first sample and decodes here") {
    SequenceRequest r = request(10, 5, 3);
    r.sampling.n = 2;
    s.add(r);
    answer(s, *s.plan_step(), 40);
    CHECK(s.take_handed_off().empty());
    const StepPlan* plan = s.plan_step();
    CHECK(carries(plan, 10));
    CHECK(carries(plan, 11));
  }
  SECTION("a continuation that came with its KV decodes here") {
    SequenceRequest r = request(20, 8, 4);
    r.resumed = {90};
    auto kv = s.take_blocks(8);
    REQUIRE(kv);
    REQUIRE_FALSE(s.add(r, *kv, 8).has_value());
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan->slices.size() == 1);
    CHECK(plan->slices[0].num_tokens == 1);  // only its last token is computed
    CHECK(carries(s.plan_step(), 20));       // and planned ahead as any decode
    answer(s, *plan, 91);
    CHECK(s.take_handed_off().empty());
  }
  SECTION("a continuation without KV recomputes here and hands off") {
    SequenceRequest r = request(30, 8, 4);
    r.resumed = {90, 91};
    s.add(r);
    answer(s, *s.plan_step(), 92);
    auto off = s.take_handed_off();
    REQUIRE(off.size() == 1);
    CHECK(off[0].continuation.resumed == std::vector<int32_t>{90, 91, 92});
    CHECK(off[0].kv_tokens == 10);
  }
}

TEST_CASE("hand-off - take_all forgets sequences handed off, and a sequence cancelled in flight ends here",
          "[scheduler][disaggregation]") {
  BlockAllocator blocks(32);
  BatchScheduler s(prefill_replica(), blocks);
  s.add(request(1, 4, 8));
  s.add(request(2, 4, 8));
  const StepPlan* plan = s.plan_step();
  CHECK_FALSE(s.cancel(2).has_value());  // in flight: cancelled when its result comes
  auto updates = answer(s, *plan, 50);
  bool cancelled = false;
  for (const auto& u : updates) cancelled = cancelled || (u.id == 2 && u.finish == Finish::cancelled);
  CHECK(cancelled);
  auto off = s.take_handed_off();
  REQUIRE(off.size() == 1);
  CHECK(off[0].continuation.id == 1);
  HandBack back = s.take_all();
  CHECK(back.requests.empty());  // request 1 left already
  CHECK(blocks.num_free() == 32);
  CHECK(s.num_handing_off() == 0);
  s.release_handed_off(1);  // ignored
}
