#include "scheduler/eplb_planner.hpp"

namespace actord {
namespace {

std::vector<int32_t> flattened(const std::vector<ExpertPlacement>& layers) {
  std::vector<int32_t> out;
  for (const ExpertPlacement& p : layers) out.insert(out.end(), p.slot_expert.begin(), p.slot_expert.end());
  return out;
}

}  // namespace

EplbPlanner::EplbPlanner(EplbSettings settings) : settings_(settings) {
  if (settings_.ep > 1 && settings_.num_experts > 0) {  // the ranks start with the initial placement
    layers_.assign(size_t(settings_.num_layers),
                   ExpertPlacement::initial(settings_.num_experts, settings_.ep, settings_.redundant));
    flat_ = flattened(layers_);
  }
}

std::vector<int32_t> EplbPlanner::on_step(const std::vector<uint64_t>& now) {
  if (settings_.step_interval <= 0 || ++steps_ < settings_.step_interval) return {};
  steps_ = 0;
  if (layers_.empty()) return {};  // not an expert parallel MoE model
  const size_t experts = size_t(settings_.num_experts);
  bool changed = false;
  for (size_t layer = 0; layer < layers_.size() && (layer + 1) * experts <= now.size(); ++layer) {
    std::vector<uint64_t> load(experts);
    uint64_t routed = 0;
    for (size_t e = 0; e < experts; ++e) {
      const size_t i = layer * experts + e;
      load[e] = now[i] - (i < since_.size() ? since_[i] : 0);
      routed += load[e];
    }
    if (routed == 0) continue;  // a dense layer, or an idle window
    ExpertPlacement next = rebalance(load, layers_[layer]);
    if (rank_imbalance(load, next) + 0.05 < rank_imbalance(load, layers_[layer])) {
      layers_[layer] = std::move(next);
      changed = true;
    }
  }
  since_ = now;
  if (!changed) return {};
  ++rebalances_;
  flat_ = flattened(layers_);
  return flat_;
}

}  // namespace actord
