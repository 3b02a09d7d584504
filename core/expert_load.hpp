// How evenly a mixture-of-experts model's tokens spread over its experts and over the ranks holding them, from the
// per-(layer, expert) token counters of SchedulerStats::expert_tokens.
//
// Contract: pure. Dense layers (no token routed to any of their experts) are left out; the ratios are averaged over
// the MoE layers; an expert-parallel group of `ep` ranks holds experts [r E / ep, (r + 1) E / ep) on rank r
// (core/topology_plan's shard_of_rank), unless a placement ([layer][slot], EPLB) says where they are (a copied
// expert's tokens then count evenly on its copies). 1.0 is a perfect spread; 0 when nothing was routed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/expert_placement.hpp"

namespace actord {

struct ExpertLoadSummary {
  int moe_layers = 0;             // layers with routed tokens
  uint64_t routed = 0;            // (token, expert) assignments in all
  double expert_max_over_mean = 0;  // per layer: the busiest expert's tokens / the mean expert's, averaged
  double rank_max_over_mean = 0;    // the same over the ep ranks' sums (1 when ep is 1)
};

inline ExpertLoadSummary summarize_expert_load(const std::vector<uint64_t>& tokens, int experts, int ep,
                                                const std::vector<int32_t>& placement = {}) {
  ExpertLoadSummary s;
  if (experts <= 0 || ep <= 0 || experts % ep != 0) return s;
  const size_t e = size_t(experts), per_rank = e / size_t(ep);
  const size_t layers = tokens.size() / e, slots = layers > 0 ? placement.size() / layers : 0;
  for (size_t first = 0; first + e <= tokens.size(); first += e) {
    uint64_t sum = 0, busiest = 0;
    std::vector<uint64_t> ranks(size_t(ep), 0);
    for (size_t i = 0; i < e; ++i) {
      sum += tokens[first + i];
      busiest = std::max(busiest, tokens[first + i]);
      ranks[i / per_rank] += tokens[first + i];
    }
    if (sum == 0) continue;
    ++s.moe_layers;
    s.routed += sum;
    s.expert_max_over_mean += double(busiest) / (double(sum) / double(e));
    if (slots > 0 && slots % size_t(ep) == 0) {
      ExpertPlacement p;
      p.ep = ep;
      p.slots_per_rank = static_cast<int>(slots / size_t(ep));
      const auto at = placement.begin() + ptrdiff_t(first / e * slots);
      p.slot_expert.assign(at, at + ptrdiff_t(slots));
      s.rank_max_over_mean += rank_imbalance(std::vector<uint64_t>(tokens.begin() + ptrdiff_t(first),
                                                                   tokens.begin() + ptrdiff_t(first + e)),
                                             p);
    } else {
      s.rank_max_over_mean += double(*std::max_element(ranks.begin(), ranks.end())) / (double(sum) / double(ep));
    }
  }
  if (s.moe_layers > 0) {
    s.expert_max_over_mean /= s.moe_layers;
    s.rank_max_over_mean /= s.moe_layers;
  }
  return s;
}

}  // namespace actord
