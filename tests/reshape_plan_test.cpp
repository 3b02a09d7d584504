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
