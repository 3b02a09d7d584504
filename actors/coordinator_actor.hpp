// The coordinator: turns a validated topology into running actors and keeps them running.
//
// It owns the router and one data parallel group's replicas; each replica is a kv_pool, its ranks (tp x pp
// workers: threads, or processes of their own, with their collective groups) and a scheduler. Messages:
// - (start_atom) -> (uint32_t errc_or_ok, std::string error, caf::actor router): spawns the router and every
//   replica at once (each rank loads its shard: WorkerInit -> WorkerReady); a replica whose ranks are all ready
//   gets its scheduler and joins the router. On failure errc is the Errc of the first error and nothing is left
//   running; on success kCoordinatorOk.
// - (scale_atom, std::string group, int32_t replicas) -> (uint32_t errc_or_ok, std::string message): adds
//   replicas (built as at start, joining the router when ready at a full share, not warming in; the group's
//   other replicas then hand back the sequences they have not started (rebalance_atom), for the router to spread
//   over the grown group; if one fails the added ones are stopped again and the fleet is as before) or removes the
//   highest-numbered ones (each drains: the router sends it nothing new, its waiting sequences go back to the
//   router at once, its running ones finish, then it stops). A group placed on nodes is laid out as its placement
//   spreads that many replicas (core/topology_plan.hpp: rank_nodes): a replica keeps a slot on its nodes, added
//   ones take the slots left, and one left without a slot drains. Answers when done. One scale at a time (another
//   is refused and changes nothing). The caller has checked the group's name, replicas >= 1 and the machine's
//   cores and memory (Engine::scale).
// - (reshape_atom, ReshapeRequest) -> (uint32_t errc_or_ok, std::string message): actord apply. Takes each group,
//   one after another in the topology's order, to the new topology's group of the same place (its shape: tp, pp,
//   ep, afd, tbo, threads, link...; its replicas count; the engine's max_num_seqs and max_num_batched_tokens), and
//   the router to the new topology's phase policies (once every group is done; a router-only change rebuilds no
//   replica). Each group changes one step at a time, as a rolling update (actors/reshape_plan.hpp):
//   each step builds one replica of the new shape beside the others (make before break), which joins the router,
//   then retires one old replica: it leaves the router (acknowledged, so nothing more is routed to it) and hands
//   every sequence back (running ones continue on the others from their tokens so far, recomputed; never an error
//   or a duplicate), and stops. A replicas-only change builds or retires replicas and touches no other. If a step's
//   replica fails to start, the steps done are undone in reverse (replicas of the old shape built again under new
//   indices), then those of the groups reshaped before, the last first, and the answer is an error saying so; every
//   group is as before. The caller has validated and planned the topology (Engine::apply): the same groups, names
//   and roles.
// - (fleet_atom) -> wire_msg FleetStatus: every replica's state, shape, ranks, pids and nodes, the reshape step
//   being carried out, the router's policies and each autoscaled group's last look.
// Autoscaling (groups[i].autoscale): every autoscale.interval the coordinator asks the serving replicas of each
// autoscaled group for their running and waiting sequences, and when scheduler/autoscaler.hpp says the group wants
// another size, scales it as scale_atom does (one resize at a time: none while a scale or an apply runs).
// - (stop_atom): stops everything, worker processes included.
// Supervision: every rank is monitored. When one goes down (a process killed, a thread's actor gone) its replica
// is rebuilt: the router stops routing to it, its scheduler hands every sequence back to the router (they continue
// on the other replicas, or on this one once it is back, recomputed from their tokens so far), its other ranks
// are stopped, and the replica is started again (a new incarnation: new collective groups, new processes).
// A rebuild that fails is retried kRebuildAttempts times, a second apart; then the replica is marked failed.
#pragma once

#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/router_interface.hpp"
#include "actors/trace_sink.hpp"
#include "comms/atoms.hpp"
#include "comms/wire_msg.hpp"
#include "core/dtype.hpp"
#include "core/topology_config.hpp"
#include "scheduler/batch_scheduler.hpp"
#include "scheduler/policy_registry.hpp"
#include "scheduler/replica_router.hpp"

namespace actord {

class ModelRegistry;

struct CoordinatorParams {
  TopologyConfig topology;
  size_t group_index = 0;  // which of topology.groups these replicas belong to
  const GroupSection& group() const { return topology.groups.at(group_index); }
  SchedulerLimits limits;
  uint32_t num_kv_blocks = 0;               // of each replica (each of its ranks holds this many of its shard)
  DType kv_dtype = DType::f32;
  int num_layers = 0;   // the model's (EPLB placements cover every layer)
  int num_experts = 0;  // per MoE layer; 0: dense
  // CPU threads of each rank of a replica (stage-major, then tp rank) as the topology plan resolved them; empty:
  // groups[0].threads for every rank.
  std::vector<int> rank_threads;
  // With placement on nodes: the node agent's address of every rank of the initial replicas (replica-major, then
  // stage, then tp rank), empty for a rank on this machine. Empty list: every rank here.
  std::vector<std::string> rank_agents;
  PhasePolicies route_policies;  // the router's (phase_policies of the topology)
  std::filesystem::path worker_executable;  // for placement: process
  std::string log_level = "warn";
  std::chrono::seconds worker_start_timeout{120};
  const ModelRegistry* registry = nullptr;   // must outlive the coordinator
  const PolicyRegistry* policies = nullptr;  // must outlive the coordinator; has topology.scheduler.policy
  std::shared_ptr<TraceSink> trace;          // --trace: every scheduler traces its steps there; null: off

  // num_kv_blocks and swap blocks of each replica lane, and the schedulers' KV lease that follows from them: a
  // quarter of the pool at first, at least one full-context sequence (limits.max_model_len and block_size set).
  void set_kv_blocks(uint32_t kv_blocks, uint32_t swap_blocks);
};

constexpr uint32_t kCoordinatorOk = UINT32_MAX;

// The coordinator's typed interface (the messages above; lost_atom comes from its schedulers, rebuild_atom and
// autoscale_atom from itself: rebuild_atom with a text is a failed replica's probe of its node agents answering,
// empty when they all answered).
using coordinator_actor =
    caf::typed_actor<caf::replies_to<start_atom>::with<uint32_t, std::string, router_actor>,
                     caf::replies_to<scale_atom, std::string, int32_t>::with<uint32_t, std::string>,
                     caf::replies_to<reshape_atom, wire_msg>::with<uint32_t, std::string>,
                     caf::replies_to<fleet_atom>::with<wire_msg>, caf::reacts_to<lost_atom, std::string>,
                     caf::reacts_to<rebuild_atom, int, uint32_t>,
                     caf::reacts_to<rebuild_atom, int, uint32_t, std::string>, caf::reacts_to<autoscale_atom>,
                     caf::reacts_to<stop_atom>>;

// One CoordinatorParams per group of the topology, in order (group_index 0, 1, ...): they share the topology and the
// router settings of the first.
coordinator_actor spawn_coordinator(caf::actor_system& system, std::vector<CoordinatorParams> groups);

}  // namespace actord
