#include "actors/remote_worker_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <deque>

#include "actors/worker_process.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"

namespace actord {
namespace {

struct pending_reply {
  wire::MessageKind kind;  // what the reply will be: WORKER_READY, STEP_RESULT, KV_EXPORT or KV_IMPORTED
  caf::typed_response_promise<wire_msg> promise;
};

// The worker interface, plus what its process's receive thread tells it.
using remote_worker_actor = worker_actor::extend<caf::reacts_to<inbound_atom, uint32_t, wire_msg>,
                                                 caf::reacts_to<link_down_atom, std::string>>;

struct remote_worker_state {
  std::unique_ptr<WorkerProcess> process;
  std::deque<pending_reply> pending;
  std::string down_reason;  // non-empty once the process is gone
  static inline const char* name = "remote_worker";
};

using self_ptr = remote_worker_actor::stateful_pointer<remote_worker_state>;

wire_msg failure_reply(wire::MessageKind kind, const std::string& reason) {
  const Error err{Errc::worker_failed, reason};
  if (kind == wire::MessageKind::WORKER_READY) {
    return build<wire::WorkerReady>([&](wire::WorkerReady::Builder out) { set_error(out.initError(), err); });
  }
  if (kind == wire::MessageKind::KV_EXPORT) {
    return build<wire::KvExport>([&](wire::KvExport::Builder out) { set_error(out.initError(), err); });
  }
  if (kind == wire::MessageKind::KV_IMPORTED) {
    return build<wire::KvImported>([&](wire::KvImported::Builder out) { set_error(out.initError(), err); });
  }
  return build<wire::StepResult>([&](wire::StepResult::Builder out) { set_error(out.initError(), err); });
}

// Everyone waiting for a reply gets a failure saying `reason`.
void fail_pending(self_ptr self, const std::string& reason) {
  auto& st = self->state;
  while (!st.pending.empty()) {
    auto reply = std::move(st.pending.front());
    st.pending.pop_front();
    reply.promise.deliver(failure_reply(reply.kind, reason));
  }
}

caf::typed_response_promise<wire_msg> forward(self_ptr self, wire::MessageKind send_kind,
                                              wire::MessageKind reply_kind, const wire_msg& msg) {
  auto promise = self->make_response_promise<wire_msg>();
  auto& st = self->state;
  if (!st.down_reason.empty() || !st.process) {
    promise.deliver(failure_reply(reply_kind, st.down_reason.empty() ? "worker process not started" : st.down_reason));
    return promise;
  }
  // If the child exited before it took the message, link_down (already on its way) answers it with the reason.
  st.process->send(send_kind, msg);
  st.pending.push_back({reply_kind, promise});
  return promise;
}

remote_worker_actor::behavior_type remote_worker_impl(self_ptr self, WorkerProcessOptions options) {
  auto me = caf::actor_cast<remote_worker_actor>(self);
  auto started = WorkerProcess::start(
      options,
      [me](Envelope env) {
        caf::anon_send(me, inbound_atom::value, static_cast<uint32_t>(env.kind), std::move(env.body));
      },
      [me](const std::string& reason) { caf::anon_send(me, link_down_atom::value, reason); });
  if (started) {
    self->state.process = std::move(*started);
  } else {
    self->state.down_reason = started.error().message;
  }
  // Stopped because it stopped answering (its scheduler sends exit_reason::unreachable): the process is killed at
  // once rather than asked to shut down, and whoever waits for a reply gets a failure. Any other exit (the
  // coordinator's shutdown) lets the destructor shut the process down cleanly.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto& st = self->state;
    if (msg.reason == caf::exit_reason::unreachable && st.process) st.process->kill();
    fail_pending(self, "worker " + options.name + " stopped: " + self->system().render(msg.reason));
    self->quit(msg.reason);
  });
  // The receive thread holds a handle to this actor; the cycle breaks when the actor quits (its state, and with it
  // the process and the thread, is destroyed then).
  return {
      [=](init_atom, const wire_msg& msg) {
        return forward(self, wire::MessageKind::WORKER_INIT, wire::MessageKind::WORKER_READY, msg);
      },
      [=](step_atom, const wire_msg& msg) {
        return forward(self, wire::MessageKind::EXECUTE_STEP, wire::MessageKind::STEP_RESULT, msg);
      },
      [=](export_kv_atom, const wire_msg& msg) {
        return forward(self, wire::MessageKind::EXPORT_KV, wire::MessageKind::KV_EXPORT, msg);
      },
      [=](import_kv_atom, const wire_msg& msg) {
        return forward(self, wire::MessageKind::IMPORT_KV, wire::MessageKind::KV_IMPORTED, msg);
      },
      [=](inbound_atom, uint32_t /*kind*/, wire_msg& body) {
        auto& pending = self->state.pending;
        if (pending.empty()) return;  // a reply nobody waits for (should not happen): drop it
        auto reply = std::move(pending.front());
        pending.pop_front();
        reply.promise.deliver(std::move(body));
      },
      // The process is gone (it exited, or stopped beating: its node went down): whoever waits gets the reason, and
      // the actor ends with it, so that its monitors (the coordinator) learn of the loss at once, not at the next
      // step sent to it.
      [=](link_down_atom, const std::string& reason) {
        self->state.down_reason = reason;
        fail_pending(self, reason);
        self->quit(caf::make_error(caf::sec::runtime_error, reason));
      },
  };
}

}  // namespace

worker_actor spawn_remote_worker(caf::actor_system& system, const WorkerProcessOptions& options) {
  return system.spawn(remote_worker_impl, options);
}

}  // namespace actord
