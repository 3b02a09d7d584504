// The kv_pool's typed interface (actors/kv_pool_actor.hpp): lease_atom (KvLeaseRequest -> KvLeaseGrant, up to the
// blocks asked: a short grant says the pool is nearly exhausted) and release_atom (KvRelease, no reply).
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "comms/atoms.hpp"
#include "comms/wire_msg.hpp"

namespace actord {

using kv_pool_actor = caf::typed_actor<caf::replies_to<lease_atom, wire_msg>::with<wire_msg>,
                                       caf::reacts_to<release_atom, wire_msg>>;

}  // namespace actord
