// A collective group's spec (comms/collectives/group_spec.hpp) in WorkerInit's CollectiveGroup, for ranks that
// join their replica's groups from their own processes. Include from .cpp files only (capnp).
#pragma once

#include "actord.capnp.h"
#include "comms/collectives/group_spec.hpp"

namespace actord {

void to_wire(const coll::GroupSpec& spec, wire::CollectiveGroup::Builder out);
// The spec of a CollectiveGroup (size 0 when the message carries none); an Error for an unknown backend.
Result<coll::GroupSpec> from_wire(wire::CollectiveGroup::Reader in);

}  // namespace actord
