#include "actors/worker_process_main.hpp"

#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "actors/worker_core.hpp"
#include "actors/shm_envelope.hpp"
#include "actors/worker_guard.hpp"
#include "core/host_cpus.hpp"
#include "comms/zmq_link.hpp"
#include "plugins/model_registry.hpp"

namespace actord {

namespace {

// engine.cpu_binding: every thread of this process (and so the threads init starts) on the CPUs the coordinator gave
// this rank in its WorkerInit; none given: unbound. A binding refused leaves the process unbound (a warning).
void bind_to_init_cpus(const std::string& name, const wire_msg& init) {
  std::vector<int> cpus;
  try {
    WireReader reader(init);
    for (const uint32_t cpu : reader.root<wire::WorkerInit>().getCpus()) cpus.push_back(static_cast<int>(cpu));
  } catch (const std::exception&) {
    return;  // core.init reports the malformed message
  }
  if (cpus.empty()) return;
  if (Status bound = bind_process_to_cpus(cpus); !bound)
    spdlog::warn("{}: not bound to CPUs: {}", name, bound.error().message);
  else
    spdlog::info("{}: bound to CPUs {}", name, cpu_list_text(cpus));
}

// The worker's end of its link to the engine: shared memory ("shm://NAME", a worker on the engine's machine) or two
// ZeroMQ sockets (tcp, a worker a node agent started). Used by the main thread, except beat(), which the heartbeat
// thread calls.
class EngineLink {
 public:
  EngineLink(const WorkerProcessArgs& args) : args_(args), parent_(getppid()) {}

  Status connect() {
    if (args_.to_worker_endpoint.rfind(kShmScheme, 0) == 0) {
      const std::string name = args_.to_worker_endpoint.substr(kShmScheme.size());
      auto link = coll::ShmLink::open(name, coll::ShmLink::Clock::now() + std::chrono::seconds(10));
      if (!link.ok()) return link.error();
      shm_.emplace(std::move(*link));
      shm_->unlink();  // mapped by both ends now: the memory goes with the last mapping
      return Status::success();
    }
    in_.emplace(context_, zmq::socket_type::pull);
    out_.emplace(context_, zmq::socket_type::push);
    // Over tcp (a worker a node agent started: no parent to watch) the engine's end is seen as its connection
    // closing, or as a connection attempt failing (the engine binds before it asks for this worker, so a refused
    // attempt means it is gone: it died while this process started): a monitor of the receiving socket reports both.
    if (args_.to_worker_endpoint.rfind("tcp://", 0) == 0) {
      const std::string monitor = "inproc://engine-link";
      if (zmq_socket_monitor(in_->handle(), monitor.c_str(), ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED) ==
          0) {
        monitor_.emplace(context_, zmq::socket_type::pair);
        monitor_->connect(monitor);
      }
    }
    try {
      in_->set(zmq::sockopt::linger, 0);
      out_->set(zmq::sockopt::linger, 1000);  // let the last reply leave before exit
      out_->set(zmq::sockopt::sndtimeo, 5000);  // the engine binds first, so this only expires if it is gone
      in_->connect(args_.to_worker_endpoint);
      out_->connect(args_.from_worker_endpoint);
    } catch (const zmq::error_t& e) {
      return make_error(Errc::worker_failed, std::string("cannot connect: ") + e.what());
    }
    return Status::success();
  }

  // Sends from a thread of its own (a ZeroMQ socket is one thread's; a shared memory link has a counter).
  std::function<void()> beater() {
    if (shm_) return [this] { shm_->beat(); };
    auto beat = std::make_shared<zmq::socket_t>(context_, zmq::socket_type::push);
    beat->set(zmq::sockopt::linger, 0);
    beat->set(zmq::sockopt::sndtimeo, 100);
    beat->connect(args_.from_worker_endpoint);
    return [this, beat] { send_envelope(*beat, wire::MessageKind::HEARTBEAT, args_.name, wire_msg{}); };
  }

  Result<std::optional<Envelope>> recv(int timeout_ms) {
    if (shm_) return recv_envelope(*shm_, std::chrono::milliseconds(timeout_ms), [this] { return engine_gone_error(); });
    return recv_envelope(*in_, timeout_ms);
  }

  void send(wire::MessageKind kind, const wire_msg& body) {
    if (shm_) {
      auto sent = send_envelope(*shm_, kind, body, coll::ShmLink::Clock::now() + std::chrono::minutes(10),
                                [this] { return engine_gone_error(); });
      if (!sent.ok()) spdlog::error("{}: {}", args_.name, sent.error().message);
      return;
    }
    send_envelope(*out_, kind, args_.name, body);
  }

  // Why the engine is gone (its process exited, or its tcp connection closed), if it is.
  std::optional<Error> engine_gone_error() {
    if (getppid() != parent_) return make_error(Errc::worker_failed, "the engine process went away");
    // Every event queued since the last call (connect, handshake, retries...): one a call let a backlog of them
    // hold the disconnection back for seconds.
    for (zmq::message_t event; monitor_ && monitor_->recv(event, zmq::recv_flags::dontwait);) {
      zmq::message_t address;
      (void)monitor_->recv(address, zmq::recv_flags::dontwait);
      uint16_t id = 0;
      if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
      if (id == ZMQ_EVENT_DISCONNECTED) return make_error(Errc::worker_failed, "the engine's connection closed");
      if (id == ZMQ_EVENT_CONNECT_RETRIED)
        return make_error(Errc::worker_failed, "the engine's endpoint " + args_.to_worker_endpoint +
                                                   " refused the connection: the engine is gone");
    }
    return std::nullopt;
  }

 private:
  const WorkerProcessArgs& args_;
  const pid_t parent_;
  std::optional<coll::ShmLink> shm_;
  zmq::context_t context_{1};
  std::optional<zmq::socket_t> in_, out_, monitor_;
};

}  // namespace

int run_worker_process(const WorkerProcessArgs& args) {
  EngineLink link(args);
  if (auto connected = link.connect(); !connected.ok()) {
    spdlog::error("{}: {}", args.name, connected.error().message);
    return 1;
  }

  // Heartbeats from a thread of their own, so that a long step does not silence them; stopped and joined when this
  // function returns.
  std::mutex beat_mutex;
  std::condition_variable_any beat_wait;
  std::jthread heart;
  if (args.heartbeat_ms > 0) {
    heart = std::jthread([&, beat = link.beater()](std::stop_token stop) {
      std::unique_lock lock(beat_mutex);
      do {
        beat();
      } while (!beat_wait.wait_for(lock, stop, std::chrono::milliseconds(args.heartbeat_ms),
                                   [&] { return stop.stop_requested(); }));
    });
  }

  // The core runs on this thread: a step costs no hop to another thread inside this process, and the next step,
  // sent ahead by the scheduler, is usually waiting in the socket when this one is done. A step that runs ahead
  // (WorkerCore::step) is answered when the next one has been queued behind it, or once the device has done it:
  // meanwhile the socket is polled without waiting. Steps are answered in the order they came.
  WorkerCore core(ModelRegistry::with_builtins());
  size_t owed = 0;  // steps received and not answered yet
  auto answer = [&](std::vector<wire_msg>& results) {
    for (wire_msg& r : results) {
      link.send(wire::MessageKind::STEP_RESULT, r);
      if (owed > 0) --owed;
    }
  };
  auto answer_pending = [&] {
    if (!core.has_pending()) return;
    std::vector<wire_msg> results{guarded_finish_pending(core)};
    answer(results);
  };
  int exit_code = 0;
  bool running = true;
  while (running) {
    auto got = link.recv(core.has_pending() ? 0 : 200);
    if (got && !got->has_value() && core.has_pending()) {  // nothing came: the pending step, once it is done
      if (core.pending_done()) answer_pending();
      else core.pause_while_pending();
      continue;
    }
    if (!got) {
      spdlog::error("{}: {}", args.name, got.error().message);
      if (auto gone = link.engine_gone_error()) {
        exit_code = 1;
        break;
      }
      continue;
    }
    if (!got->has_value()) {
      if (auto gone = link.engine_gone_error()) {
        spdlog::error("{}: {}", args.name, gone->message);
        exit_code = 1;
        break;
      }
      continue;
    }
    Envelope env = std::move(**got);
    wire::MessageKind reply_kind;
    wire_msg reply;
    if (env.kind != wire::MessageKind::EXECUTE_STEP) answer_pending();  // replies in the order asked
    switch (env.kind) {
      case wire::MessageKind::SHUTDOWN: running = false; continue;
      case wire::MessageKind::WORKER_INIT:
        reply_kind = wire::MessageKind::WORKER_READY;
        bind_to_init_cpus(args.name, env.body);
        reply = guarded<wire::WorkerReady>([&] { return core.init(env.body); });
        break;
      case wire::MessageKind::EXECUTE_STEP: {
        std::vector<wire_msg> results = guarded_step(core, env.body, ++owed);
        answer(results);
        continue;
      }
      case wire::MessageKind::EXPORT_KV:
        reply_kind = wire::MessageKind::KV_EXPORT;
        reply = guarded<wire::KvExport>([&] { return core.export_kv(env.body); });
        break;
      case wire::MessageKind::IMPORT_KV:
        reply_kind = wire::MessageKind::KV_IMPORTED;
        reply = guarded<wire::KvImported>([&] { return core.import_kv(env.body); });
        break;
      default:
        spdlog::warn("{}: ignoring a message of kind {}", args.name, static_cast<int>(env.kind));
        continue;
    }
    link.send(reply_kind, reply);
    if (reply_kind == wire::MessageKind::WORKER_READY) {
      WireReader reader(reply);
      if (has_error(reader.root<wire::WorkerReady>().getError())) {
        exit_code = 3;
        running = false;
      }
    }
  }
  return exit_code;
}

}  // namespace actord
