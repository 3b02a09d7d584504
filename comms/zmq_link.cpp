#include "comms/zmq_link.hpp"

#include <algorithm>
#include <cerrno>

#include "comms/capnp_codec.hpp"

namespace actord {

bool send_envelope(zmq::socket_t& socket, wire::MessageKind kind, const std::string& target, const wire_msg& body) {
  wire_msg header = build<wire::Envelope>([&](wire::Envelope::Builder out) {
    out.setKind(kind);
    out.setTarget(target);
  });
  // Once the first frame of a multipart message is queued, the rest is accepted too.
  if (!socket.send(zmq::buffer(header.bytes), zmq::send_flags::sndmore)) return false;
  socket.send(zmq::buffer(body.bytes), body.bulk.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  for (size_t i = 0; i < body.bulk.size(); ++i) {
    socket.send(zmq::buffer(body.bulk[i]), i + 1 < body.bulk.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  return true;
}

int poll_through_signals(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  for (;;) {
    try {
      return zmq::poll(items, count, timeout);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (timeout.count() < 0) continue;
    timeout = std::max(std::chrono::milliseconds(0),
                       std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()));
  }
}

namespace {

// One frame; a signal while the frame is taken is retried. Returns false when none is there (EAGAIN).
bool recv_frame(zmq::socket_t& socket, zmq::message_t& frame) {
  for (;;) {
    try {
      return socket.recv(frame, zmq::recv_flags::none).has_value();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

}  // namespace

Result<std::optional<Envelope>> recv_envelope(zmq::socket_t& socket, int timeout_ms) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  if (poll_through_signals(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return std::optional<Envelope>{};
  zmq::message_t header;
  zmq::message_t body;
  if (!recv_frame(socket, header)) return std::optional<Envelope>{};
  if (!header.more()) return make_error(Errc::parse_error, "ZeroMQ envelope without a body frame");
  if (!recv_frame(socket, body)) return make_error(Errc::parse_error, "ZeroMQ body frame lost");
  Envelope env;
  for (bool more = body.more(); more;) {  // bulk frames
    zmq::message_t frame;
    if (!recv_frame(socket, frame)) return make_error(Errc::parse_error, "ZeroMQ bulk frame lost");
    const auto* p = static_cast<const uint8_t*>(frame.data());
    env.body.bulk.emplace_back(p, p + frame.size());
    more = frame.more();
  }
  try {
    // Small frames live inside zmq_msg_t and may be unaligned: WireReader copies them when needed.
    WireReader reader(static_cast<const uint8_t*>(header.data()), header.size());
    auto h = reader.root<wire::Envelope>();
    env.kind = h.getKind();
    env.target = h.getTarget();
  } catch (const std::exception& e) {
    return make_error(Errc::parse_error, std::string("malformed ZeroMQ envelope: ") + e.what());
  }
  const auto* p = static_cast<const uint8_t*>(body.data());
  env.body.bytes.assign(p, p + body.size());
  return std::optional<Envelope>{std::move(env)};
}

}  // namespace actord
