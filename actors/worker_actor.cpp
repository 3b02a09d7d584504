#include "actors/worker_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <deque>
#include <thread>

#include "actors/worker_core.hpp"
#include "comms/atoms.hpp"
#include "actors/worker_guard.hpp"

namespace actord {
namespace {

// The worker interface, plus the reminder the actor sends itself while a step runs ahead (WorkerCore::step).
using local_worker_actor = worker_actor::extend<caf::reacts_to<pending_atom>>;

struct worker_state {
  std::unique_ptr<WorkerCore> core;
  // The steps not answered yet, in the order they came (a step that runs ahead is answered after the next one
  // is queued, or once the device has done it): results are delivered front first.
  std::deque<caf::typed_response_promise<wire_msg>> unanswered;
  bool reminded = false;  // a pending_atom is on its way
  static inline const char* name = "worker";
};

using self_ptr = local_worker_actor::stateful_pointer<worker_state>;

void answer(self_ptr self, std::vector<wire_msg>& results) {
  auto& st = self->state;
  for (wire_msg& r : results) {
    if (st.unanswered.empty()) break;
    auto promise = std::move(st.unanswered.front());
    st.unanswered.pop_front();
    promise.deliver(std::move(r));
  }
}

// A pending step is answered before anything else the worker is asked (steps are answered in order, and an export
// reads the KV the step wrote).
void answer_pending(self_ptr self) {
  if (!self->state.core->has_pending()) return;
  std::vector<wire_msg> results{guarded_finish_pending(*self->state.core)};
  answer(self, results);
}

void remind(self_ptr self) {
  if (self->state.core->has_pending() && !self->state.reminded) {
    self->state.reminded = true;
    self->send(self, pending_atom::value);
  }
}

local_worker_actor::behavior_type worker_impl(self_ptr self, const ModelRegistry* registry,
                                              std::shared_ptr<RankLinks> links) {
  self->state.core = std::make_unique<WorkerCore>(*registry, links ? std::move(*links) : RankLinks{});
  return {
      [=](init_atom, const wire_msg& msg) -> wire_msg {
        answer_pending(self);
        return guarded<wire::WorkerReady>([&] { return self->state.core->init(msg); });
      },
      [=](step_atom, const wire_msg& msg) -> caf::typed_response_promise<wire_msg> {
        auto& st = self->state;
        auto promise = self->make_response_promise<wire_msg>();
        st.unanswered.push_back(promise);
        std::vector<wire_msg> results = guarded_step(*st.core, msg, st.unanswered.size());
        answer(self, results);
        remind(self);
        return promise;
      },
      // While the device still works on the pending step, the reminder goes round again (behind any step that came
      // meanwhile, which then queues behind it on the device first).
      [=](pending_atom) {
        auto& st = self->state;
        st.reminded = false;
        if (!st.core->has_pending()) return;
        if (!st.core->pending_done()) {
          st.core->pause_while_pending();
          remind(self);
          return;
        }
        answer_pending(self);
      },
      [=](export_kv_atom, const wire_msg& msg) -> wire_msg {
        answer_pending(self);
        return guarded<wire::KvExport>([&] { return self->state.core->export_kv(msg); });
      },
      [=](import_kv_atom, const wire_msg& msg) -> wire_msg {
        answer_pending(self);
        return guarded<wire::KvImported>([&] { return self->state.core->import_kv(msg); });
      },
  };
}

}  // namespace

worker_actor spawn_worker(caf::actor_system& system, const ModelRegistry& registry, RankLinks links) {
  // Detached: a forward pass runs for milliseconds and must not hold one of the scheduler's shared threads (and the
  // ranks of a replica, each on its own thread, wait for each other in their collectives).
  auto worker = system.spawn<caf::detached>(worker_impl, &registry, std::make_shared<RankLinks>(std::move(links)));
  return caf::actor_cast<worker_actor>(worker);
}

}  // namespace actord
