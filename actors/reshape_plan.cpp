#include "actors/reshape_plan.hpp"

#include <algorithm>

namespace actord {

std::vector<ReshapeStep> plan_reshape(const std::vector<int>& old, bool same_shape, int replicas, int next_index) {
  std::vector<ReshapeStep> steps;
  const int have = static_cast<int>(old.size());
  if (same_shape) {
    for (int i = have; i < replicas; ++i) steps.push_back({next_index++, std::nullopt});
    for (int i = have - 1; i >= replicas && i >= 0; --i) steps.push_back({std::nullopt, old[size_t(i)]});
    return steps;
  }
  for (int i = 0; i < std::max(have, replicas); ++i) {
    ReshapeStep step;
    if (i < replicas) step.build = next_index++;
    if (i < have) step.retire = old[size_t(i)];
    steps.push_back(step);
  }
  return steps;
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
