// The shared memory backend: the ranks are processes of one node (or threads: anything that maps the segment).
//
// Contract: join() maps the group's segment (rank 0 creates it, the others wait for it, up to spec.timeout),
// waits until every rank has joined, then unlinks its name, so nothing is left in /dev/shm even if every rank is
// killed afterwards. Each rank stages its data in its own slot of the segment (two slots of spec.slot_bytes, used
// in turn, so one operation's writes never race a slow peer's reads of the one before); larger operations run in
// pieces. Ranks wait for each other on futexes in the segment, spinning briefly first; a peer whose process ends
// is noticed within ~10 ms (a pidfd), one that hangs at the timeout. send/recv go through a ring buffer of
// spec.channel_bytes per ordered pair of ranks: send returns once its bytes are in the ring. Everything else is the
// Communicator contract.
#pragma once

#include <memory>

#include "comms/collectives/communicator.hpp"

namespace actord::coll {

Result<std::unique_ptr<Communicator>> join_shm_group(const GroupSpec& spec, int rank);

}  // namespace actord::coll
