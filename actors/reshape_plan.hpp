// How actord apply takes a serving group to its new topology one change at a time, as a rolling update
// (coordinator_actor.hpp carries the steps out; this is the pure plan, tested on its own).
//
// Contract: pure, no actors. A step builds at most one replica (of the new shape, under a fresh index; it joins the
// router once ready) and then retires at most one old replica (it leaves the router and hands its sequences back,
// to continue on the others). So at most one replica more than the group's larger size exists at any time, and
// the group never has fewer serving replicas than the smaller of its sizes before and after.
// - Same shape (only the replicas count changes): the missing replicas are built, or the highest-numbered ones
//   retire; the others are not touched (plan_resize: placed on nodes, those whose place the new layout lacks).
// - New shape: step i builds new replica i (while i < replicas) and retires old replica i (while i < old count).
// A step that fails (its replica does not start) stops the plan; plan_rollback gives the steps that undo the ones
// done: in reverse order, a replica of the old shape is built for each one retired, and each one built retires.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace actord {

struct ReshapeStep {
  std::optional<int> build;   // this index gets a replica of the target shape, which joins the router
  std::optional<int> retire;  // then this replica leaves the router, hands its sequences back and stops

  bool operator==(const ReshapeStep&) const = default;
};

// `old`: the replicas' indices now, in order; `same_shape`: new replicas would be built exactly as the old ones;
// `replicas`: the group's size after; `next_index`: the first index never used (indices are not reused).
std::vector<ReshapeStep> plan_reshape(const std::vector<int>& old, bool same_shape, int replicas, int next_index);

// Where a replica runs: the node agent of each of its ranks ("" for this machine).
using ReplicaPlace = std::vector<std::string>;

// A same-shape resize of a group whose layout places replicas (placement on nodes spreads the count evenly, so
// slot k's place depends on the count): `places[i]` is where old[i] runs, `slots[k]` where replica k of the new
// layout runs. Each old replica, in order, keeps the first free slot of its place; the slots left get new replicas
// (fresh indices from `next_index`, built first, in slot order) and the replicas left over retire (the highest
// first). With every place the same this is plan_reshape's same-shape plan.
struct ResizePlan {
  std::vector<ReshapeStep> steps;
  std::vector<int> slot_of_build;  // of each step that builds, in order: its slot of the new layout
};
ResizePlan plan_resize(const std::vector<int>& old, const std::vector<ReplicaPlace>& places,
                       const std::vector<ReplicaPlace>& slots, int next_index);

// The steps undoing `done` (the steps of a plan carried out before one failed): built replicas (of the old shape)
// take fresh indices from `next_index`.
std::vector<ReshapeStep> plan_rollback(std::span<const ReshapeStep> done, int next_index);

// "replica/5 replaces replica/2", "replica/5 joins", "replica/2 retires": for status and logs.
std::string describe(const ReshapeStep& step);

}  // namespace actord
