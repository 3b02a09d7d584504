// actord scale and autoscaling's resizes of one group (coordinator_state.hpp: scale_group): the group laid out as
// its plan spreads the new count, replicas built for the slots no replica holds and drained from those left over.
#include <caf/send.hpp>

#include <algorithm>
#include <memory>

#include "actors/coordinator_state.hpp"
#include "core/topology_plan.hpp"

namespace actord::coord {
namespace {

// p's group at `replicas` replicas: with placement on nodes, its ranks' agents as the plan spreads that many
// (core/topology_plan.hpp: rank_agents).
CoordinatorParams resized(const CoordinatorParams& p, int replicas) {
  CoordinatorParams out = p;
  GroupSection& g = out.topology.groups.at(out.group_index);
  g.replicas = replicas;
  if (g.placement == Placement::node) out.rank_agents = rank_agents(out.topology, g);
  return out;
}

// The group's replicas that are not draining, by index.
std::vector<int> active_replicas(const coordinator_state& st, size_t gi) {
  std::vector<int> out;
  for (const auto& [index, r] : st.replicas)
    if (r.state != ReplicaState::draining && r.params && r.params->group_index == gi) out.push_back(index);
  return out;
}

}  // namespace

ReplicaPlace place_of(const CoordinatorParams& p, int slot) {
  const size_t n = static_cast<size_t>(p.group().ranks_per_replica());
  ReplicaPlace out(n);
  for (size_t k = 0; k < n; ++k)
    if (const size_t at = static_cast<size_t>(slot) * n + k; at < p.rank_agents.size()) out[k] = p.rank_agents[at];
  return out;
}

ResizePlan plan_group_resize(const coordinator_state& st, size_t gi, const CoordinatorParams& target) {
  const std::vector<int> old = active_replicas(st, gi);
  std::vector<ReplicaPlace> places, slots;
  for (int index : old) {
    const Replica& r = st.replicas.at(index);
    places.push_back(place_of(*r.params, r.plan_slot));
  }
  for (int k = 0; k < target.group().replicas; ++k) slots.push_back(place_of(target, k));
  return plan_resize(old, places, slots, st.next_index);
}

void scale_group(self_ptr self, size_t gi, int replicas, std::function<void(uint32_t, const std::string&)> done) {
  auto& st = self->state;
  const std::string name = st.groups.at(gi).group().name;
  const int have = static_cast<int>(active_replicas(st, gi).size());
  if (replicas == have)
    return done(kCoordinatorOk, "group " + name + " has " + std::to_string(have) + " replicas already");
  // The group as the plan lays out `replicas` replicas: each replica keeps a slot where it runs, new ones take the
  // slots left, those left over retire (reshape_plan.hpp: plan_resize).
  const auto target = std::make_shared<const CoordinatorParams>(resized(st.groups.at(gi), replicas));
  const ResizePlan plan = plan_group_resize(st, gi, *target);
  std::vector<int> added, removed;
  for (const ReshapeStep& step : plan.steps) {
    if (step.build) added.push_back(*step.build);
    if (step.retire) removed.push_back(*step.retire);
  }
  const std::vector<int> slots = plan.slot_of_build;
  st.scaling = true;
  const std::string message =
      "group " + name + ": " + std::to_string(have) + " -> " + std::to_string(replicas) + " replicas";
  auto retire = [=] {
    drain_replicas(self, removed, [=] {
      self->state.scaling = false;
      done(kCoordinatorOk, message);
    });
  };
  if (added.empty()) return retire();
  build_replicas(self, added, target, [=](std::optional<Error> failure) {
    if (failure) {
      self->state.scaling = false;
      return done(static_cast<uint32_t>(failure->code), "adding replicas failed, the group is as before: " + failure->message);
    }
    // The group lacked capacity: the new replicas take a full share at once (the others hand back what they have
    // not started, for the router to spread over them all).
    join_at_full_share(self, added, removed);
    retire();
  }, slots);
}

}  // namespace actord::coord
