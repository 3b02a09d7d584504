#include "actors/worker_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/worker_core.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"

#include <kj/exception.h>

namespace actord {
namespace {

struct worker_state {
  std::unique_ptr<WorkerCore> core;
  static inline const char* name = "worker";
};

// Whatever escapes the core becomes a reply carrying its true cause instead of a dead actor: a capnp reader throws
// kj::Exception on a malformed message (invalid_argument), an allocation std::bad_alloc (out_of_memory); anything
// else is a bug (internal).
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

caf::behavior worker_impl(caf::stateful_actor<worker_state>* self, const ModelRegistry* registry) {
  self->state.core = std::make_unique<WorkerCore>(*registry);
  return {
      [=](init_atom, const wire_msg& msg) -> wire_msg {
        return guarded<wire::WorkerReady>([&] { return self->state.core->init(msg); });
      },
      [=](step_atom, const wire_msg& msg) -> wire_msg {
        return guarded<wire::StepResult>([&] { return self->state.core->execute(msg); });
      },
      [=](export_kv_atom, const wire_msg& msg) -> wire_msg {
        return guarded<wire::KvExport>([&] { return self->state.core->export_kv(msg); });
      },
      [=](import_kv_atom, const wire_msg& msg) -> wire_msg {
        return guarded<wire::KvImported>([&] { return self->state.core->import_kv(msg); });
      },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& system, const ModelRegistry& registry) {
  // Detached: a forward pass runs for milliseconds and must not hold one of the scheduler's shared threads.
  return system.spawn<caf::detached>(worker_impl, &registry);
}

}  // namespace actord
