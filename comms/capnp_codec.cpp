#include "comms/capnp_codec.hpp"

#include <kj/io.h>

#include <capnp/serialize.h>

namespace actord {

wire_msg encode(capnp::MessageBuilder& builder) {
  // Straight into the wire_msg's bytes: one copy of the segments.
  const auto segments = builder.getSegmentsForOutput();
  wire_msg out;
  out.bytes.resize(capnp::computeSerializedSizeInWords(segments) * sizeof(capnp::word));
  kj::ArrayOutputStream stream(kj::arrayPtr(reinterpret_cast<kj::byte*>(out.bytes.data()), out.bytes.size()));
  capnp::writeMessage(stream, segments);
  return out;
}

WireReader::WireReader(const uint8_t* data, size_t size) {
  const size_t n_words = size / sizeof(capnp::word);
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) != 0 || size % sizeof(capnp::word) != 0) {
    copy_ = kj::heapArray<capnp::word>((size + sizeof(capnp::word) - 1) / sizeof(capnp::word));
    std::memset(copy_.begin(), 0, copy_.size() * sizeof(capnp::word));
    std::memcpy(copy_.begin(), data, size);
    reader_ = kj::heap<capnp::FlatArrayMessageReader>(copy_.asPtr());
  } else {
    reader_ = kj::heap<capnp::FlatArrayMessageReader>(
        kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(data), n_words));
  }
}

namespace {

wire::ErrorCode to_wire(Errc code) {
  switch (code) {
    case Errc::invalid_argument: return wire::ErrorCode::INVALID_ARGUMENT;
    case Errc::invalid_config: return wire::ErrorCode::INVALID_CONFIG;
    case Errc::not_found: return wire::ErrorCode::NOT_FOUND;
    case Errc::unsupported: return wire::ErrorCode::UNSUPPORTED;
    case Errc::parse_error: return wire::ErrorCode::PARSE_ERROR;
    case Errc::resource_exhausted: return wire::ErrorCode::RESOURCE_EXHAUSTED;
    case Errc::out_of_memory: return wire::ErrorCode::OUT_OF_MEMORY;
    case Errc::worker_failed: return wire::ErrorCode::WORKER_FAILED;
    case Errc::internal: return wire::ErrorCode::INTERNAL;
  }
  return wire::ErrorCode::INTERNAL;
}

Errc from_wire(wire::ErrorCode code) {
  switch (code) {
    case wire::ErrorCode::INVALID_ARGUMENT: return Errc::invalid_argument;
    case wire::ErrorCode::INVALID_CONFIG: return Errc::invalid_config;
    case wire::ErrorCode::NOT_FOUND: return Errc::not_found;
    case wire::ErrorCode::UNSUPPORTED: return Errc::unsupported;
    case wire::ErrorCode::PARSE_ERROR: return Errc::parse_error;
    case wire::ErrorCode::RESOURCE_EXHAUSTED: return Errc::resource_exhausted;
    case wire::ErrorCode::OUT_OF_MEMORY: return Errc::out_of_memory;
    case wire::ErrorCode::WORKER_FAILED: return Errc::worker_failed;
    default: return Errc::internal;
  }
}

}  // namespace

void set_error(wire::Error::Builder out, const Error& error) {
  out.setCode(to_wire(error.code));
  out.setMessage(error.message);
}

Error get_error(wire::Error::Reader in) { return Error{from_wire(in.getCode()), in.getMessage()}; }

}  // namespace actord
