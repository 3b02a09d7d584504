// The one payload type actors exchange: the bytes of a serialized Cap'n Proto message (comms/schemas/).
//
// In one process it travels through the CAF mailbox without copies (CAF messages are copy-on-write); across
// processes the same bytes become a ZeroMQ frame. Light header: CAF's type_name only, no caf/all.hpp, no capnp.
#pragma once

#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <vector>

namespace actord {

struct wire_msg {
  std::vector<uint8_t> bytes;  // a flat capnp message: segment table then segments
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_msg& x) {
  return f(caf::meta::type_name("wire_msg"), x.bytes);
}

}  // namespace actord
