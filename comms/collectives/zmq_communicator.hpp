// The ZeroMQ backend: the ranks are processes on one node or several, reached over tcp:// (or ipc:// on one node).
//
// Contract: join() binds spec.endpoints[rank] (a PULL socket: everything for this rank arrives there), meets the
// others through rank 0 (each announces the address it bound; rank 0 answers with the table of all of them), and
// connects a PUSH socket to every peer; it returns once rank 0 has heard from every rank, or an Error at the
// timeout. Every message is two frames: a 32-byte header (kind, sender, operation sequence, step, piece, group
// id; host byte order, so all ranks must share it) and the payload. all_reduce is a reduce-scatter in which every
// rank sends each owner its part directly, so that the owner adds the contributions in rank order (a ring would add
// them in a rotated order, different for each part), followed by an all-gather around the ring (rank r sends to
// r + 1); each rank sends (size - 1) / size of the buffer in each half, as a ring does. Frames are at most
// spec.piece_bytes, so reduction overlaps transfer. all_to_all sends each block straight to its rank: the frame's
// length is the count. A failure sends an abort frame to every peer, so they fail at once instead of at their
// timeout; a closed communicator says goodbye. A peer whose connection ends without a goodbye (its process died,
// its node is unreachable) is noticed within ~0.1 s through a socket monitor; one that hangs with its connection up,
// at the timeout. Everything else is the Communicator contract.
#pragma once

#include <memory>

#include "comms/collectives/communicator.hpp"

namespace actord::coll {

Result<std::unique_ptr<Communicator>> join_zmq_group(const GroupSpec& spec, int rank);

}  // namespace actord::coll
