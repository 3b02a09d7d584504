// EPLB placement: the initial layout, which copy serves a token, rebalancing a skewed load.
#include <catch2/catch.hpp>

#include "core/expert_placement.hpp"

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
