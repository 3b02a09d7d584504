// The coordinator's state and the helpers its files share (coordinator_actor.cpp: building and draining replicas,
// status; coordinator_recovery.cpp: rebuilding a replica that lost a rank; coordinator_scale.cpp and
// coordinator_autoscale.cpp: resizes; coordinator_reshape.cpp: actord apply's rolling reshape). Internal to the
// coordinator.
#pragma once

#include <caf/typed_event_based_actor.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator_actor.hpp"
#include "actors/reshape_plan.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/worker_interface.hpp"
#include "comms/collectives/group_spec.hpp"
#include "core/host_cpus.hpp"
#include "core/status.hpp"
#include "scheduler/autoscaler.hpp"

namespace actord::coord {

enum class ReplicaState { starting, serving, draining, rebuilding, failed };

inline const char* state_name(ReplicaState s) {
  switch (s) {
    case ReplicaState::starting: return "starting";
    case ReplicaState::serving: return "serving";
    case ReplicaState::draining: return "draining";
    case ReplicaState::rebuilding: return "rebuilding";
    case ReplicaState::failed: return "failed";
  }
  return "?";
}

struct Replica {
  int index = 0;
  int plan_slot = 0;  // which replica of its params' plan it is (CoordinatorParams::rank_agents: where its ranks run)
  std::shared_ptr<const CoordinatorParams> params;  // what it is built from (a reshape's replicas differ)
  uint32_t incarnation = 0;
  ReplicaState state = ReplicaState::starting;
  std::vector<kv_pool_actor> kv_pools;  // one per lane
  scheduler_actor scheduler;
  std::vector<worker_actor> ranks;  // lane-major, then stage, then tp rank; then AFD's FFN ranks
  std::vector<std::string> rank_names;
  std::vector<std::string> rank_nodes;  // the node each rank runs on ("" for this machine)
  std::vector<int32_t> pids;
  // The CPUs each rank's process is bound to (engine.cpu_binding; the stages of a tp rank share theirs), empty for a
  // rank left unbound; given back to coordinator_state::cpus when the replica's actors stop.
  std::vector<std::vector<int>> rank_cpus;
  std::string last_failure;
  int failed_rebuilds = 0;  // in a row (actors/rebuild_backoff.hpp: the wait before the next attempt)
};

struct coordinator_state {
  // What each group's replicas are built from (CoordinatorParams::group_index is its place here; a reshape changes
  // each in turn). Every entry's route_policies is the router's.
  std::vector<CoordinatorParams> groups;
  router_actor router;
  std::map<int, Replica> replicas;
  CpuAllocator cpus{usable_cpus()};  // this machine's CPUs among its worker processes (engine.cpu_binding)
  // Collective groups' generations: each group made gets a new id. The first is drawn at random, so that engines
  // started one after another in one process (tests do that) never reuse the shared memory segment names of groups
  // an earlier engine's killed ranks may not have unlinked yet ("/actord-coll-<pid>-<id>").
  uint64_t next_group_id = coll::first_group_id();
  uint32_t replacements = 0;
  int next_index = 0;    // replica indices are never reused (a rebuilt replica keeps its own)
  bool scaling = false;  // a scale or a reshape is being carried out
  std::string change;    // the reshape's current step, for status
  // Of each group (by group_index): its autoscaler (none without groups[i].autoscale) and its last look, for status.
  std::vector<std::optional<Autoscaler>> autoscalers;
  std::vector<std::string> autoscale_looks;
  bool autoscale_armed = false;  // an autoscale_atom is on its way
  static inline const char* name = "coordinator";
};

using self_ptr = coordinator_actor::stateful_pointer<coordinator_state>;
using BuildDone = std::function<void(std::optional<Error>)>;

// The replica's actors, stopped and no longer watched (a worker process is killed); its CPUs given back.
void stop_replica_actors(self_ptr self, Replica& r);
// Replica `index` if it is still the incarnation a callback was made for, else null.
Replica* current(self_ptr self, int index, uint32_t incarnation);
// Builds replica `index` from its params (its kv pools, ranks and scheduler); `done` gets nothing once every rank is
// ready, or the error.
void build_replica(self_ptr self, int index, BuildDone done);
// Tells the router to route nothing more to `scheduler` and runs `then` once it answered.
void after_leaving_router(self_ptr self, const scheduler_actor& scheduler, std::function<void()> then);

// coordinator_recovery.cpp. keep_last_stats: the scheduler's last statistics handed to the router (kept in its totals
// once the scheduler is gone), then `then`, on any error too. recover: a rank of replica `index` went down (`why`):
// its sequences go back to the router and it is rebuilt. rebuild: (rebuild_atom, index, incarnation), an attempt
// (a replica on other nodes asks their agents first, off this thread); probed: that ask's answer (`why` empty: every
// agent answered).
void keep_last_stats(self_ptr self, const scheduler_actor& scheduler, std::function<void()> then);
void recover(self_ptr self, int index, const std::string& why);
void rebuild(self_ptr self, int index, uint32_t incarnation);
void probed(self_ptr self, int index, uint32_t incarnation, const std::string& why);

// Builds replicas `indices` together from `params` (as its plan's replicas `plan_slots`; none: the same numbers);
// `done` gets nothing when all are ready (none joined the router yet), or the first error (every one of them
// stopped and forgotten).
void build_replicas(self_ptr self, const std::vector<int>& indices, std::shared_ptr<const CoordinatorParams> params,
                    std::function<void(std::optional<Error>)> done, std::vector<int> plan_slots = {});
// Drains and removes replicas `indices`; `done` when all have stopped. With `migrate` their running sequences go
// back to the router at once (migrate_atom: they continue elsewhere) instead of finishing there.
void drain_replicas(self_ptr self, const std::vector<int>& indices, std::function<void()> done, bool migrate = false);
// The replica takes requests from the router from now on; warming in unless the whole group starts together.
void join_router(self_ptr self, Replica& r, bool warm_in = true);
// Replicas `joining` take requests at a full share at once (a group that lacked capacity: added by a scale, back
// after an outage); the other serving replicas of their groups, except `leaving`, hand back what they have not
// started (rebalance_atom), for the router to spread over them all.
void join_at_full_share(self_ptr self, const std::vector<int>& joining, const std::vector<int>& leaving = {});

// Where replica `slot` of p's plan runs (p.rank_agents); and the same-shape resize of group gi to `target`'s count
// and layout: its replicas (not draining) matched to target's slots by place (coordinator_scale.cpp).
ReplicaPlace place_of(const CoordinatorParams& p, int slot);
ResizePlan plan_group_resize(const coordinator_state& st, size_t gi, const CoordinatorParams& target);

// Resizes group `gi` to `replicas` (added ones built and joined at a full share, the others rebalanced; removed
// ones, the highest-numbered, drained) and calls `done` with kCoordinatorOk or an Errc, and what it did. The
// caller checked that no scale runs (scaling).
void scale_group(self_ptr self, size_t gi, int replicas, std::function<void(uint32_t, const std::string&)> done);

// coordinator_autoscale.cpp: sends the first autoscale_atom when a group has autoscale and none is on its way;
// autoscale_tick looks at the autoscaled groups' load, scales one that wants it, and sends the next.
void arm_autoscale(self_ptr self);
void autoscale_tick(self_ptr self);

// coordinator_reshape.cpp: (reshape_atom, ReshapeRequest), answered when the rolling reshape is done or rolled back.
caf::result<uint32_t, std::string> reshape(self_ptr self, const wire_msg& msg);

}  // namespace actord::coord
