// Envelopes over a shared memory link (comms/collectives/shm_link): the same messages as over ZeroMQ
// (comms/zmq_link), framed as [kind (u32), the capnp body, one frame per bulk buffer]. A worker process on the
// engine's machine talks to it this way; one a node agent started, over ZeroMQ tcp.
//
// Contract: as ShmLink's: one sending and one receiving thread per end; send gives up when give_up() returns an
// Error (the peer is gone) or at the deadline; recv returns nothing when no message began within `wait`, and an
// Error for a malformed message (never aborts on bad bytes).
#pragma once

#include <chrono>
#include <optional>

#include "comms/collectives/shm_link.hpp"
#include "comms/zmq_link.hpp"

namespace actord {

// "shm://" + segment name: how a worker's command line names its link.
inline constexpr std::string_view kShmScheme = "shm://";

Status send_envelope(coll::ShmLink& link, wire::MessageKind kind, const wire_msg& body,
                     coll::ShmLink::Clock::time_point deadline, const coll::ShmLink::GiveUp& give_up);
Result<std::optional<Envelope>> recv_envelope(coll::ShmLink& link, std::chrono::milliseconds wait,
                                              const coll::ShmLink::GiveUp& give_up);

}  // namespace actord
