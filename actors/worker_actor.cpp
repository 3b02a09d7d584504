#include "actors/worker_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/worker_core.hpp"
#include "comms/atoms.hpp"
#include "actors/worker_guard.hpp"

namespace actord {
namespace {

struct worker_state {
  std::unique_ptr<WorkerCore> core;
  static inline const char* name = "worker";
};

worker_actor::behavior_type worker_impl(worker_actor::stateful_pointer<worker_state> self,
                                        const ModelRegistry* registry, std::shared_ptr<RankLinks> links) {
  self->state.core = std::make_unique<WorkerCore>(*registry, links ? std::move(*links) : RankLinks{});
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

worker_actor spawn_worker(caf::actor_system& system, const ModelRegistry& registry, RankLinks links) {
  // Detached: a forward pass runs for milliseconds and must not hold one of the scheduler's shared threads (and the
  // ranks of a replica, each on its own thread, wait for each other in their collectives).
  return system.spawn<caf::detached>(worker_impl, &registry, std::make_shared<RankLinks>(std::move(links)));
}

}  // namespace actord
