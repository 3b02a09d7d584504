// Envelopes over ZeroMQ: frame 1 is a capnp Envelope {kind, target}, frame 2 the capnp body (a wire_msg), then one
// frame per bulk buffer of the wire_msg.
//
// Contract: a socket is used by one thread at a time (ZeroMQ's rule). recv_envelope() returns nothing on timeout
// and an Error for a malformed envelope (wrong frame count, unreadable header); it never aborts on bad bytes.
// Include only from .cpp files and the headers of the few classes that own sockets (actors/worker_process.hpp):
// it pulls in zmq.hpp and capnp.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "comms/wire_msg.hpp"
#include "core/status.hpp"
#include "actord.capnp.h"

namespace actord {

struct Envelope {
  wire::MessageKind kind = wire::MessageKind::SHUTDOWN;
  std::string target;
  wire_msg body;
};

// Returns false when the socket could not take the message within its send timeout (ZMQ_SNDTIMEO; a PUSH socket
// with no connected peer cannot); nothing was sent then.
bool send_envelope(zmq::socket_t& socket, wire::MessageKind kind, const std::string& target, const wire_msg& body);

// zmq::poll that a signal does not break: on EINTR (a timer, SIGCHLD, a profiler) it polls again for the time left
// (a negative timeout: forever). Returns how many items have events; other errors throw as zmq::poll does.
int poll_through_signals(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout);

// Waits up to timeout_ms (-1: forever) for one envelope; a signal arriving meanwhile neither ends the wait nor throws.
Result<std::optional<Envelope>> recv_envelope(zmq::socket_t& socket, int timeout_ms);

}  // namespace actord
