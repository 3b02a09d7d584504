// Building and reading capnp messages carried in a wire_msg.
//
// Contract: encode() flattens a MessageBuilder; WireReader reads a wire_msg (or any byte range) whatever its
// alignment: Cap'n Proto aborts on unaligned input, so misaligned bytes (e.g. a small ZeroMQ frame stored inside
// zmq_msg_t) are first copied into a word-aligned buffer. A malformed message throws kj::Exception from root();
// callers at trust boundaries catch it. Include only from .cpp files: it pulls in capnp.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>

#include <cstring>
#include <string>
#include <vector>

#include "comms/wire_msg.hpp"
#include "core/status.hpp"
#include "actord.capnp.h"

namespace actord {

wire_msg encode(capnp::MessageBuilder& builder);

class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size);
  explicit WireReader(const wire_msg& msg) : WireReader(msg.bytes.data(), msg.bytes.size()) {}
  template <class T>
  typename T::Reader root() {
    return reader_->getRoot<T>();
  }

 private:
  kj::Array<capnp::word> copy_;
  kj::Own<capnp::FlatArrayMessageReader> reader_;
};

// Builds a message of struct T with `fill(T::Builder)` and returns its bytes. `words_hint`: the expected size in
// 8-byte words, for big messages (one first segment of that size instead of a chain of growing ones).
template <class T, class Fill>
wire_msg build(Fill&& fill, unsigned words_hint = capnp::SUGGESTED_FIRST_SEGMENT_WORDS) {
  capnp::MallocMessageBuilder mb(words_hint);
  fill(mb.initRoot<T>());
  return encode(mb);
}

// Copies a capnp list of primitives into a std::vector (capnp iterators do not model std iterators).
template <class T, class ListReader>
std::vector<T> to_vector(ListReader list) {
  std::vector<T> out;
  out.reserve(list.size());
  for (auto v : list) out.push_back(static_cast<T>(v));
  return out;
}

// Fills a capnp list of primitives from a std::vector.
template <class ListBuilder, class T>
void fill_list(ListBuilder list, const std::vector<T>& values) {
  for (uint32_t i = 0; i < values.size(); ++i) list.set(i, values[i]);
}

// A capnp Text of all of `s`, embedded NUL characters included (the implicit conversion stops at the first NUL).
inline capnp::Text::Reader text_of(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }
// All of a capnp Text as a std::string, embedded NULs included.
inline std::string string_of(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

void set_error(wire::Error::Builder out, const Error& error);
Error get_error(wire::Error::Reader in);  // code none -> Errc::internal with empty message; check has_error first
inline bool has_error(wire::Error::Reader in) { return in.getCode() != wire::ErrorCode::NONE; }

}  // namespace actord
