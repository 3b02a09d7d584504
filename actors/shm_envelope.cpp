#include "actors/shm_envelope.hpp"

#include <cstring>
#include <vector>

namespace actord {

Status send_envelope(coll::ShmLink& link, wire::MessageKind kind, const wire_msg& body,
                     coll::ShmLink::Clock::time_point deadline, const coll::ShmLink::GiveUp& give_up) {
  const auto kind_value = static_cast<uint32_t>(kind);
  std::vector<std::span<const std::byte>> frames;
  frames.reserve(2 + body.bulk.size());
  frames.push_back(std::as_bytes(std::span(&kind_value, 1)));
  frames.push_back(std::as_bytes(std::span(body.bytes)));
  for (const auto& b : body.bulk) frames.push_back(std::as_bytes(std::span(b)));
  return link.send(frames, deadline, give_up);
}

Result<std::optional<Envelope>> recv_envelope(coll::ShmLink& link, std::chrono::milliseconds wait,
                                              const coll::ShmLink::GiveUp& give_up) {
  auto got = link.recv(wait, give_up);
  if (!got.ok()) return got.error();
  if (!got->has_value()) return std::optional<Envelope>{};
  coll::ShmLink::Frames& frames = **got;
  if (frames.size() < 2 || frames[0].size() != sizeof(uint32_t)) {
    return make_error(Errc::parse_error, "shared memory envelope with " + std::to_string(frames.size()) +
                                             " frames (a kind and a body at least)");
  }
  uint32_t kind = 0;
  std::memcpy(&kind, frames[0].data(), sizeof(kind));
  Envelope env;
  env.kind = static_cast<wire::MessageKind>(kind);
  env.body.bytes = std::move(frames[1]);
  for (size_t i = 2; i < frames.size(); ++i) env.body.bulk.push_back(std::move(frames[i]));
  return std::optional<Envelope>{std::move(env)};
}

}  // namespace actord
