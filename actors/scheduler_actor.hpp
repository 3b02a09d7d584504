// The scheduler actor of one replica: continuous batching over its KV lease, one ExecuteStep per step.
//
// Messages in: (submit_atom, SubmitRequest) from a client, which then receives (delta_atom, StreamDelta) after
// every step that produced tokens for that request, the last one with a finish reason; (cancel_atom,
// CancelRequest). The scheduler asks its kv_pool for a lease once at start and allocates blocks from it locally, so
// a step costs exactly one round trip: ExecuteStep to the worker, StepResult back. With plan_ahead the next step is
// planned and sent while the current one executes (two in flight at most): the worker finds it queued and the
// scheduler's work overlaps the compute instead of adding to each step.
#pragma once

#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/kv_pool_interface.hpp"
#include "actors/router_interface.hpp"
#include "actors/trace_sink.hpp"
#include "actors/worker_interface.hpp"
#include "scheduler/batch_scheduler.hpp"
#include "scheduler/eplb_planner.hpp"

namespace actord {

// The scheduler's typed interface: submissions and cancels (from the router, as the tokenizer actor they came
// from), stats (summed by the router), the lost worker, drain, migrate and rebalance requests of the coordinator,
// and its own deadline checks.
using scheduler_actor = caf::typed_actor<caf::reacts_to<submit_atom, wire_msg>, caf::reacts_to<cancel_atom, wire_msg>,
                                         caf::replies_to<stats_atom, wire_msg>::with<wire_msg>,
                                         caf::reacts_to<deadline_atom>,
                                         caf::replies_to<lost_atom, std::string>::with<std::string>,
                                         caf::replies_to<drain_atom>::with<bool>,
                                         caf::replies_to<migrate_atom>::with<bool>, caf::reacts_to<rebalance_atom>>;

// `step_timeout` (engine.step_timeout): a step whose result is that much later than its expected compute time
// (scheduler/step_deadline.hpp) declares the worker failed: the scheduler stops the worker actor (a worker process
// is killed with it), and that step and every later one fail their sequences with a worker_failed error saying so.
// A lost worker (a step error of kind worker_failed, an unreachable worker, a missed deadline, or (lost_atom) from
// the coordinator) fails nothing: the scheduler tells `router` to send it no more (leave_atom), hands every
// sequence back to it as a continuation with the tokens reported so far (requeue_atom, as the sequence's
// submitter; at most kMaxHandBacks = 3 times in a row without a token generated between, then it ends with an
// error), stops its ranks, tells `supervisor` (lost_atom, why: the coordinator rebuilds the replica) and passes on whatever still arrives. (drain_atom) -> bool: hands back what waits, lets what runs finish, then answers. (migrate_atom) -> bool: a
// reshape replaces the replica: every sequence goes back (running ones as continuations with their tokens so far,
// not counted as hand-backs; with limits.move_kv those decoding take their KV along, gathered from the lane's ranks:
// actors/kv_move.hpp), the steps in flight are dropped, whatever arrives later goes back too, and the answer comes
// once all went. (rebalance_atom): a replica joined the group (a scale-up): the waiting sequences that hold no KV
// here go back to the router (not counted as hand-backs), which spreads them over the group with the new one. A
// continuation that arrives with KV gets blocks from a lane's lease (grown first when short) and is
// admitted once every KV rank of the lane wrote its part, computing only from there (recomputed if a write failed).
// After a step that finished sequences it reports its outstanding tokens to the router (load_atom).
// A replica has one lane, or with attention data parallel (groups[].ep beyond tp) ep / tp lanes: each lane has its
// own ranks, KV pool, lease and BatchScheduler, and a request goes to the lane with the fewest outstanding tokens.
// The lanes step in lockstep, because their experts serve each other's tokens in every step: each step sends every
// lane an ExecuteStep, an idle lane's without sequences, and a step's results are taken once every lane's came.
// A lane's `worker` is its driver rank (it answers); `followers` its other tensor/pipeline parallel ranks, which get
// every ExecuteStep as well and are stopped with it. A lost rank of any lane loses the replica.
// Expert parallel load balancing of the replica (groups[i].num_redundant_experts, .eplb_step_interval): after each
// result the scheduler asks its EplbPlanner (scheduler/eplb_planner.hpp) and sends a new placement with the next
// ExecuteStep (all ranks switch before that step's forward pass; steps in flight keep the old one).
// One lane of a replica: its driver rank, its other ranks, the kv_pool of its KV blocks, and its batcher's
// scheduling policy (null: FCFS; shared only so that CAF can copy the lane).
struct SchedulerLane {
  worker_actor worker;
  std::vector<worker_actor> followers;
  kv_pool_actor kv_pool;
  std::shared_ptr<SchedulingPolicy> policy;
};

// Two-batch overlap as the ranks run it (groups[].tbo, micro_batches): how many micro-batches they cut each step into
// (0: none); `chosen` (tbo: auto): the scheduler tells them, step by step, whether to cut it at all
// (scheduler/overlap_chooser.hpp: split where splitting was measured faster for steps of that size).
struct MicroBatching {
  int count = 0;
  bool chosen = false;
};

// `trace` (--trace): every step is traced by every rank, their spans and the scheduler's own go there.
// `ffn_pool`: AFD's FFN ranks of the replica (groups[].afd): each gets every step without sequences, told the
// busiest lane's tokens, and serves the lanes' FFNs; stopped with the lanes. `micro`: with two-batch overlap, so
// that ranks of lanes and FFN pools are told the busiest lane's tokens in each micro-batch.
scheduler_actor spawn_scheduler(caf::actor_system& system, const SchedulerLimits& limits, std::vector<SchedulerLane> lanes,
                                std::vector<worker_actor> ffn_pool, MicroBatching micro, router_actor router,
                                caf::actor supervisor, std::string name,
                                std::chrono::milliseconds step_timeout = std::chrono::milliseconds(2000),
                                EplbSettings eplb = {}, std::shared_ptr<TraceSink> trace = nullptr);

}  // namespace actord
