// Runs one request of a WorkerCore so that nothing escapes it: whatever is thrown becomes a reply of the same kind
// carrying an Error with its true cause. A capnp reader throws kj::Exception on a malformed message
// (invalid_argument), an allocation std::bad_alloc (out_of_memory); anything else is a bug (internal).
// Shared by the worker actor and the worker process's loop. Include from .cpp files only: it pulls in capnp.
#pragma once

#include <kj/exception.h>

#include <new>
#include <string>

#include "comms/capnp_codec.hpp"

namespace actord {

template <class Reply, class F>
wire_msg guarded(F&& f) {
  auto reply = [](Errc code, const std::string& why) {
    return build<Reply>([&](typename Reply::Builder out) { set_error(out.initError(), Error{code, why}); });
  };
  try {
    return f();
  } catch (const kj::Exception& e) {
    return reply(Errc::invalid_argument, "malformed message: " + std::string(e.getDescription().cStr()));
  } catch (const std::bad_alloc&) {
    return reply(Errc::out_of_memory, "out of memory while handling the message");
  } catch (const std::exception& e) {
    return reply(Errc::internal, e.what());
  }
}

}  // namespace actord
