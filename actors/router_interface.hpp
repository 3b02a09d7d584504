// The router's typed interface (actors/router_actor.hpp says what each message does): submit_atom (SubmitRequest, from
// its owner), requeue_atom (owner, SubmitRequest: a continuation a scheduler hands back), cancel_atom
// (CancelRequest), join_atom (replica id, scheduler, warm_in, role), leave_atom (scheduler -> true once nothing more goes
// to it), load_atom (a scheduler's outstanding tokens), policy_atom (each phase's
// RoutePolicy), stats_atom (StatsRequest -> SchedulerStats: the total over the replicas, those gone included) and
// stats_atom (scheduler, SchedulerStats -> true: a retiring scheduler's last statistics, kept in the total once it is
// gone). Schedulers
// and owners travel as plain handles: the router forwards to them as the request's owner (caf::send_as).
#pragma once

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>

#include "comms/atoms.hpp"
#include "comms/wire_msg.hpp"

namespace actord {

using router_actor = caf::typed_actor<caf::reacts_to<submit_atom, wire_msg>,
                                      caf::reacts_to<requeue_atom, caf::actor, wire_msg>,
                                      caf::reacts_to<cancel_atom, wire_msg>,
                                      caf::reacts_to<join_atom, uint64_t, caf::actor, bool, uint32_t>,
                                      caf::replies_to<leave_atom, caf::actor>::with<bool>,
                                      caf::reacts_to<load_atom, uint64_t>,
                                      caf::reacts_to<policy_atom, uint32_t, uint32_t>,
                                      caf::replies_to<stats_atom, wire_msg>::with<wire_msg>,
                                      caf::replies_to<stats_atom, caf::actor, wire_msg>::with<bool>>;

}  // namespace actord
