// The one payload type actors exchange: the bytes of a serialized Cap'n Proto message (comms/schemas/), and the
// bulk tensors (KV blocks, later hidden states) that message refers to, which never go inside capnp.
//
// In one process it travels through the CAF mailbox without copies (CAF messages are copy-on-write); across
// processes the same bytes become a ZeroMQ frame and each bulk buffer one more frame after it. Light header: CAF's type_name only, no caf/all.hpp, no capnp.
#pragma once

#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <vector>

namespace actord {

struct wire_msg {
  std::vector<uint8_t> bytes;  // a flat capnp message: segment table then segments
  std::vector<std::vector<uint8_t>> bulk;  // raw buffers the message refers to by index (usually none)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_msg& x) {
  return f(caf::meta::type_name("wire_msg"), x.bytes, x.bulk);
}

}  // namespace actord
