// Runs one request of a WorkerCore so that nothing escapes it: whatever is thrown becomes a reply of the same kind
// carrying an Error with its true cause. A capnp reader throws kj::Exception on a malformed message
// (invalid_argument), an allocation std::bad_alloc (out_of_memory); anything else is a bug (internal).
// Shared by the worker actor and the worker process's loop. Include from .cpp files only: it pulls in capnp.
#pragma once

#include <kj/exception.h>

#include <new>
#include <string>

#include <vector>

#include "actors/worker_core.hpp"
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

// The pending step's StepResult (WorkerCore::finish_pending), guarded.
inline wire_msg guarded_finish_pending(WorkerCore& core) {
  return guarded<wire::StepResult>([&] { return core.finish_pending(); });
}

// WorkerCore::step, guarded: the results it completed, oldest first. When it throws, the pending step's result
// (answered first, in step order), then the error for each step still owed one; `owed` counts this step too.
inline std::vector<wire_msg> guarded_step(WorkerCore& core, const wire_msg& msg, size_t owed) {
  std::vector<wire_msg> results;
  const wire_msg failed = guarded<wire::StepResult>([&] {
    core.step(msg, results);
    return wire_msg{};
  });
  if (failed.bytes.empty()) return results;
  if (core.has_pending()) results.push_back(guarded_finish_pending(core));
  while (results.size() < owed) results.push_back(failed);
  return results;
}

}  // namespace actord
