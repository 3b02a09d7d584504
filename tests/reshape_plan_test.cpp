// actord apply's rolling plan (actors/reshape_plan.hpp): one replica in and one out per step, replicas-only changes
// leave the others alone, and a rollback undoes the steps done in reverse.
#include <catch2/catch.hpp>

#include "actors/reshape_plan.hpp"

using namespace actord;

namespace {
constexpr std::nullopt_t none = std::nullopt;
}

TEST_CASE("reshape plan: a replicas-only change builds the missing replicas or retires the highest ones",
          "[apply][plan]") {
  CHECK(plan_reshape({0}, true, 3, 1) == std::vector<ReshapeStep>{{1, none}, {2, none}});
  CHECK(plan_reshape({0, 4, 5}, true, 1, 6) == std::vector<ReshapeStep>{{none, 5}, {none, 4}});
  CHECK(plan_reshape({0, 1}, true, 2, 2).empty());
}

TEST_CASE("reshape plan: a resize of a group placed on nodes keeps each replica where it runs, builds the slots of "
          "the new layout left, and retires the replicas it has no slot for", "[apply][plan][node]") {
  const ReplicaPlace here{""}, b{"tcp://b:1"};
  // [local, b] from 2 to 3 replicas: the even spread is [local, local, b]: replica/2 here, in slot 1.
  ResizePlan grow = plan_resize({0, 1}, {here, b}, {here, here, b}, 2);
  CHECK(grow.steps == std::vector<ReshapeStep>{{2, none}});
  CHECK(grow.slot_of_build == std::vector<int>{1});
  // From 3 to 1 ([local]): replica/0 keeps it, the others retire, the highest first.
  ResizePlan shrink = plan_resize({0, 1, 2}, {here, b, here}, {here}, 3);
  CHECK(shrink.steps == std::vector<ReshapeStep>{{none, 2}, {none, 1}});
  CHECK(shrink.slot_of_build.empty());
  // pp 2 over [local, b]: 1 replica straddles both nodes; at 2 each replica has a node to itself, so neither slot
  // is the old replica's place: two are built, then it retires.
  ResizePlan straddle = plan_resize({0}, {{"", "tcp://b:1"}}, {{"", ""}, {"tcp://b:1", "tcp://b:1"}}, 1);
  CHECK(straddle.steps == std::vector<ReshapeStep>{{1, none}, {2, none}, {none, 0}});
  CHECK(straddle.slot_of_build == std::vector<int>{0, 1});
}

TEST_CASE("reshape plan: a new shape replaces the replicas one at a time, then builds or retires the difference",
          "[apply][plan]") {
  CHECK(plan_reshape({0}, false, 1, 1) == std::vector<ReshapeStep>{{1, 0}});
  CHECK(plan_reshape({0, 1}, false, 3, 2) == std::vector<ReshapeStep>{{2, 0}, {3, 1}, {4, none}});
  CHECK(plan_reshape({3, 7, 8}, false, 1, 9) == std::vector<ReshapeStep>{{9, 3}, {none, 7}, {none, 8}});
  CHECK(plan_reshape({}, false, 1, 0) == std::vector<ReshapeStep>{{0, none}});
}

TEST_CASE("reshape plan: a rollback undoes the steps done, last first, with old-shape replicas under new indices",
          "[apply][plan]") {
  const std::vector<ReshapeStep> done{{2, 0}, {3, 1}};
  CHECK(plan_rollback(done, 4) == std::vector<ReshapeStep>{{4, 3}, {5, 2}});
  const std::vector<ReshapeStep> grew{{1, none}};
  CHECK(plan_rollback(grew, 2) == std::vector<ReshapeStep>{{none, 1}});
  const std::vector<ReshapeStep> shrank{{none, 2}};
  CHECK(plan_rollback(shrank, 3) == std::vector<ReshapeStep>{{3, none}});
  CHECK(plan_rollback({}, 3).empty());
}

TEST_CASE("reshape plan: steps describe themselves for status", "[apply][plan]") {
  CHECK(describe({5, 2}) == "replica/5 replaces replica/2");
  CHECK(describe({5, none}) == "replica/5 joins");
  CHECK(describe({none, 2}) == "replica/2 retires");
}
