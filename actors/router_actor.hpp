// The router of an engine's groups: spreads requests over their replicas' schedulers (DESIGN.md §2: tokenizer ->
// router -> scheduler), with scheduler/replica_router.hpp's policy.
//
// Messages:
// - (submit_atom, SubmitRequest) from a tokenizer actor: forwarded as that actor (caf::send_as), so the
//   scheduler's deltas go straight back to it: the router costs one hop per request, none per step. With no
//   replica taking requests (the only one is being replaced) requests wait here in order until one joins.
// - (requeue_atom, owner, SubmitRequest) from a scheduler: a continuation it handed back (its worker was lost, it
//   drains, or it prefilled the sequence for a decode replica); routed like a submission, as `owner`. One whose request was cancelled lately ends here, cancelled.
// - (cancel_atom, CancelRequest): to every scheduler known (taking requests or draining); a request waiting here
//   ends here with a cancelled delta.
// - (join_atom, uint64 replica, scheduler, bool warm_in, uint32 role) from the coordinator: routes to it from now
//   on (monitored: one that goes down is forgotten), the requests of its role's phase (ReplicaRole: a submission
//   or continuation that generated nothing yet is in its prefill phase, one that did in its decode phase); with warm_in (a replica added to a serving group) its share grows as it
//   reports finished sequences (scheduler/replica_router.hpp). (leave_atom, scheduler) -> bool from the coordinator or the scheduler itself: no new
//   requests to it; it still gets cancels until it is down. The answer comes after the last request routed to it
//   was put in its mailbox (a local send enqueues at once), so whoever then tells the scheduler to hand everything
//   back (drain, migrate, lost) knows no request reaches it after that: stop a scheduler only after its leave was
//   answered, or requests routed to it meanwhile are lost with it.
// - (load_atom, uint64 outstanding tokens) from a scheduler: replaces the router's estimate for it.
// - (policy_atom, uint32 prefill, uint32 decode) from the coordinator (actord apply): the RoutePolicy of each phase
//   for the requests routed from now on; a value that is no RoutePolicy is ignored.
// - (stats_atom, StatsRequest) -> SchedulerStats: the sum over the schedulers known, plus the counters last seen
//   of those gone (core/scheduler_stats.hpp add_stats).
#pragma once

#include <caf/fwd.hpp>

#include "actors/router_interface.hpp"

#include "scheduler/replica_router.hpp"

namespace actord {

router_actor spawn_router(caf::actor_system& system, PhasePolicies policies, int block_size);

}  // namespace actord
