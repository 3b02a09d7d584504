#include "core/expert_placement.hpp"

#include <algorithm>
#include <numeric>

namespace actord {

ExpertPlacement ExpertPlacement::initial(int num_experts, int ep, int redundant) {
  ExpertPlacement p;
  p.ep = ep;
  const int own = num_experts / ep;
  p.slots_per_rank = own + redundant;
  for (int r = 0; r < ep; ++r) {
    for (int i = 0; i < own; ++i) p.slot_expert.push_back(r * own + i);
    const int next = (r + 1) % ep;
    for (int i = 0; i < redundant; ++i) p.slot_expert.push_back(next * own + i % own);
  }
  return p;
}

int ExpertPlacement::slot_for(int32_t token, int expert, int owner) const {
  int copies = 0, local = 0;
  for (int s = 0; s < static_cast<int>(slot_expert.size()); ++s) {
    if (slot_expert[size_t(s)] != expert) continue;
    ++copies;
    local += rank_of_slot(s) == owner;
  }
  // Among the owner's own copies when it has some (no row travels), else among all of them.
  const int among = local > 0 ? local : copies;
  int pick = static_cast<int>(static_cast<uint32_t>(token) % static_cast<uint32_t>(std::max(among, 1)));
  for (int s = 0; s < static_cast<int>(slot_expert.size()); ++s) {
    if (slot_expert[size_t(s)] != expert || (local > 0 && rank_of_slot(s) != owner)) continue;
    if (pick-- == 0) return s;
  }
  return -1;  // an expert without a slot: not a valid placement
}

ExpertPlacement rebalance(const std::vector<uint64_t>& load, const ExpertPlacement& now) {
  const int experts = static_cast<int>(load.size()), ep = now.ep, per_rank = now.slots_per_rank;
  std::vector<int> copies(size_t(experts), 1);
  for (int extra = ep * per_rank - experts; extra > 0; --extra) {
    int best = 0;
    for (int e = 1; e < experts; ++e) {  // load[e] / copies[e] > load[best] / copies[best], without division
      if (load[size_t(e)] * uint64_t(copies[size_t(best)]) > load[size_t(best)] * uint64_t(copies[size_t(e)])) best = e;
    }
    ++copies[size_t(best)];
  }
  struct Item {
    double weight;
    int expert;
  };
  std::vector<Item> items;
  for (int e = 0; e < experts; ++e)
    for (int c = 0; c < copies[size_t(e)]; ++c) items.push_back({double(load[size_t(e)]) / copies[size_t(e)], e});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.weight > b.weight; });
  std::vector<double> rank_load(size_t(ep), 0.0);
  std::vector<std::vector<int>> held(static_cast<size_t>(ep), std::vector<int>{});
  for (const Item& item : items) {
    int best = -1;
    for (const bool allow_twice : {false, true}) {
      for (int r = 0; r < ep; ++r) {
        const auto& h = held[size_t(r)];
        if (static_cast<int>(h.size()) >= per_rank) continue;
        if (!allow_twice && std::find(h.begin(), h.end(), item.expert) != h.end()) continue;
        if (best < 0 || rank_load[size_t(r)] < rank_load[size_t(best)]) best = r;
      }
      if (best >= 0) break;
    }
    held[size_t(best)].push_back(item.expert);
    rank_load[size_t(best)] += item.weight;
  }
  ExpertPlacement out;
  out.ep = ep;
  out.slots_per_rank = per_rank;
  for (auto& h : held) {
    std::sort(h.begin(), h.end());
    out.slot_expert.insert(out.slot_expert.end(), h.begin(), h.end());
  }
  return out;
}

double rank_imbalance(const std::vector<uint64_t>& load, const ExpertPlacement& placement) {
  std::vector<int> copies(load.size(), 0);
  for (int32_t e : placement.slot_expert) ++copies[size_t(e)];
  std::vector<double> ranks(size_t(placement.ep), 0.0);
  for (size_t s = 0; s < placement.slot_expert.size(); ++s) {
    const auto e = size_t(placement.slot_expert[s]);
    ranks[size_t(placement.rank_of_slot(int(s)))] += double(load[e]) / copies[e];
  }
  const double total = std::accumulate(ranks.begin(), ranks.end(), 0.0);
  if (total <= 0) return 0.0;
  return *std::max_element(ranks.begin(), ranks.end()) / (total / placement.ep);
}

}  // namespace actord
