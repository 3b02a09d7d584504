// EPLB placement: the initial layout, which copy serves a token, rebalancing a skewed load.
#include <algorithm>
#include <catch2/catch.hpp>

#include "core/expert_placement.hpp"
#include "scheduler/eplb_planner.hpp"

using namespace actord;

TEST_CASE("expert placement - initial layout, a token's copy, rebalancing a skewed load to even ranks",
          "[ep][eplb]") {
  const ExpertPlacement start = ExpertPlacement::initial(8, 2, 2);
  CHECK(start.slots_per_rank == 6);
  CHECK(start.slot_expert == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 0, 1});
  // Expert 4 has a copy on each rank: a token stays on its owner's; expert 2 only on rank 0.
  CHECK(start.slot_for(7, 4, 0) == 4);
  CHECK(start.slot_for(7, 4, 1) == 6);
  CHECK(start.slot_for(7, 2, 1) == 2);
  // Experts 0 and 1 take nearly everything: all of it on rank 0 without their copies on rank 1.
  const std::vector<uint64_t> skewed = {1000, 900, 10, 10, 10, 10, 10, 10};
  const ExpertPlacement plain = ExpertPlacement::initial(8, 2, 0);
  CHECK(rank_imbalance(skewed, plain) == Approx(2.0 * 1920 / 1960));
  const ExpertPlacement better = rebalance(skewed, start);
  CHECK(better.slots_per_rank == 6);
  for (int e = 0; e < 8; ++e)  // every expert keeps a slot
    CHECK(std::count(better.slot_expert.begin(), better.slot_expert.end(), e) >= 1);
  CHECK(rank_imbalance(skewed, better) < 1.05);
  CHECK(rebalance(skewed, start) == better);  // deterministic
  // Even load, no redundancy: nothing to gain, still a valid placement.
  const ExpertPlacement even = rebalance(std::vector<uint64_t>(8, 5), plain);
  CHECK(rank_imbalance(std::vector<uint64_t>(8, 5), even) == Approx(1.0));
}

TEST_CASE("EPLB planner - every interval it rebalances the layers whose load is skewed, and only those, from the "
          "tokens since its last check", "[eplb]") {
  EplbSettings settings;
  settings.step_interval = 2;
  settings.ep = 2;
  settings.num_experts = 4;
  settings.redundant = 1;
  settings.num_layers = 2;
  EplbPlanner planner(settings);
  const std::vector<int32_t> initial = planner.placement();
  REQUIRE(initial.size() == 2 * 6);  // 2 layers x (2 ranks x 3 slots)
  // Layer 0: expert 1 (on rank 0 only at first: ranks hold 0 1 +2 | 2 3 +0) takes nearly every token; layer 1: even.
  std::vector<uint64_t> counters = {0, 0, 0, 0, 0, 0, 0, 0};
  auto feed = [&](std::vector<uint64_t> add) {
    for (size_t i = 0; i < counters.size(); ++i) counters[i] += add[i];
    return planner.on_step(counters);
  };
  CHECK(feed({4, 90, 3, 3, 25, 25, 25, 25}).empty());  // not yet: the interval is 2 results
  const std::vector<int32_t> moved = feed({4, 90, 3, 3, 25, 25, 25, 25});
  REQUIRE(moved.size() == initial.size());
  CHECK(planner.rebalances() == 1);
  CHECK(moved == planner.placement());
  CHECK(std::vector<int32_t>(moved.begin() + 6, moved.end()) ==
        std::vector<int32_t>(initial.begin() + 6, initial.end()));  // the even layer keeps its placement
  // Expert 1 now has a slot on each rank.
  CHECK(std::count(moved.begin(), moved.begin() + 3, 1) >= 1);
  CHECK(std::count(moved.begin() + 3, moved.begin() + 6, 1) >= 1);
  // The same skew again: the new placement already evens it out, nothing moves; an idle window moves nothing.
  feed({4, 90, 3, 3, 25, 25, 25, 25});
  CHECK(feed({4, 90, 3, 3, 25, 25, 25, 25}).empty());
  feed({0, 0, 0, 0, 0, 0, 0, 0});
  CHECK(feed({0, 0, 0, 0, 0, 0, 0, 0}).empty());
  CHECK(planner.rebalances() == 1);
  // Off (interval 0) or without EP: never.
  settings.step_interval = 0;
  EplbPlanner off(settings);
  for (int i = 0; i < 4; ++i) CHECK(off.on_step(counters).empty());
  settings.step_interval = 1;
  settings.ep = 1;
  EplbPlanner dense(settings);
  CHECK(dense.placement().empty());
  CHECK(dense.on_step(counters).empty());
}
