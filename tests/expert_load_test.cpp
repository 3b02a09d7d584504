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
  CHECK(summarize_expert_load(tokens, 4, 3).moe_layers == 0);  // ep not dividing the experts: nothing to say
}
