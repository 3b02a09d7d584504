// summarize_expert_load: how evenly tokens spread over experts and over the EP ranks that hold them.
#include <catch2/catch.hpp>

#include "core/expert_load.hpp"

using namespace actord;

TEST_CASE("expert load summary - busiest over mean per layer, averaged over MoE layers - dense layers left out",
          "[ep][stats]") {
  // Layer 0: experts 4, 2, 1, 1 (mean 2); layer 1 dense; layer 2: 2, 2, 2, 2.
  const std::vector<uint64_t> tokens = {4, 2, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2};
  const ExpertLoadSummary one = summarize_expert_load(tokens, 4, 1);
  CHECK(one.moe_layers == 2);
  CHECK(one.routed == 16);
  CHECK(one.expert_max_over_mean == Approx((2.0 + 1.0) / 2));
  CHECK(one.rank_max_over_mean == Approx(1.0));
  // ep 2: rank 0 holds experts 0-1 (6 of layer 0's 8 tokens, mean 4), rank 1 experts 2-3.
  const ExpertLoadSummary two = summarize_expert_load(tokens, 4, 2);
  CHECK(two.rank_max_over_mean == Approx((6.0 / 4.0 + 1.0) / 2));
  CHECK(summarize_expert_load({}, 4, 2).moe_layers == 0);
  // With a placement (EPLB), a copied expert's tokens split evenly over its copies. Layer 0, slots 0 1 0 | 2 3 0:
  // rank 0 4/3 + 2 + 4/3, rank 1 1 + 1 + 4/3, mean 4; layer 2, slots 0 1 2 | 2 3 3: rank 0 2 + 2 + 1, rank 1 1 + 1 + 1.
  const std::vector<int32_t> placement = {0, 1, 0, 2, 3, 0, 0, 1, 2, 2, 3, 1, 0, 1, 2, 2, 3, 3};
  const ExpertLoadSummary placed = summarize_expert_load(tokens, 4, 2, placement);
  CHECK(placed.rank_max_over_mean == Approx(((14.0 / 3) / 4 + 5.0 / 4) / 2));
  CHECK(summarize_expert_load(tokens, 4, 3).moe_layers == 0);  // ep not dividing the experts: nothing to say
}
