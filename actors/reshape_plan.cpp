#include "actors/reshape_plan.hpp"

#include <algorithm>

namespace actord {

std::vector<ReshapeStep> plan_reshape(const std::vector<int>& old, bool same_shape, int replicas, int next_index) {
  std::vector<ReshapeStep> steps;
  const int have = static_cast<int>(old.size());
  if (same_shape)
    return plan_resize(old, std::vector<ReplicaPlace>(old.size()), std::vector<ReplicaPlace>(size_t(std::max(replicas, 0))),
                       next_index)
        .steps;
  for (int i = 0; i < std::max(have, replicas); ++i) {
    ReshapeStep step;
    if (i < replicas) step.build = next_index++;
    if (i < have) step.retire = old[size_t(i)];
    steps.push_back(step);
  }
  return steps;
}

ResizePlan plan_resize(const std::vector<int>& old, const std::vector<ReplicaPlace>& places,
                       const std::vector<ReplicaPlace>& slots, int next_index) {
  ResizePlan out;
  std::vector<bool> taken(slots.size(), false);
  std::vector<int> left_over;
  for (size_t i = 0; i < old.size(); ++i) {
    size_t k = 0;
    while (k < slots.size() && (taken[k] || slots[k] != places[i])) ++k;
    if (k < slots.size()) taken[k] = true;
    else left_over.push_back(old[i]);
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    if (taken[k]) continue;
    out.steps.push_back({next_index++, std::nullopt});
    out.slot_of_build.push_back(static_cast<int>(k));
  }
  for (auto it = left_over.rbegin(); it != left_over.rend(); ++it) out.steps.push_back({std::nullopt, *it});
  return out;
}

std::vector<ReshapeStep> plan_rollback(std::span<const ReshapeStep> done, int next_index) {
  std::vector<ReshapeStep> steps;
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    ReshapeStep undo;
    if (it->retire) undo.build = next_index++;
    undo.retire = it->build;
    if (undo.build || undo.retire) steps.push_back(undo);
  }
  return steps;
}

std::string describe(const ReshapeStep& step) {
  auto name = [](int index) { return "replica/" + std::to_string(index); };
  if (step.build && step.retire) return name(*step.build) + " replaces " + name(*step.retire);
  if (step.build) return name(*step.build) + " joins";
  if (step.retire) return name(*step.retire) + " retires";
  return "nothing";
}

}  // namespace actord
