// Making a group's communicators: the backend follows from the GroupSpec (its placement, or an explicit backend).
//
// Contract: for a thread placement (backend in_process), create_local_group() makes all ranks at once, in rank
// order, for the caller to hand to the ranks' threads. For process and node placements (shared_memory, zmq) each
// rank calls join_group() in its own process (or thread); it returns once every rank has joined, or an Error at
// spec.timeout naming the group and the ranks that did not come. Tearing a group down is destroying its
// communicators; a resized group is a new one (same name, new id, new size), made the same way while the engine
// runs. Errors (a bad spec, the wrong call for the backend) name the group and the field.
#pragma once

#include <memory>
#include <vector>

#include "comms/collectives/communicator.hpp"

namespace actord::coll {

Result<std::vector<std::unique_ptr<Communicator>>> create_local_group(const GroupSpec& spec);

Result<std::unique_ptr<Communicator>> join_group(const GroupSpec& spec, int rank);

}  // namespace actord::coll
