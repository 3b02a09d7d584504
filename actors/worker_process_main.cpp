#include "actors/worker_process_main.hpp"

#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <optional>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "actors/worker_core.hpp"
#include "actors/worker_guard.hpp"
#include "comms/zmq_link.hpp"
#include "plugins/model_registry.hpp"

namespace actord {

int run_worker_process(const WorkerProcessArgs& args) {
  const pid_t parent = getppid();
  zmq::context_t context(1);
  zmq::socket_t in(context, zmq::socket_type::pull);
  zmq::socket_t out(context, zmq::socket_type::push);
  // Over tcp (a worker a node agent started: no parent to watch) the engine's end is seen as its connection
  // closing: a monitor of the receiving socket reports the disconnect.
  std::optional<zmq::socket_t> engine_link;
  if (args.to_worker_endpoint.rfind("tcp://", 0) == 0) {
    const std::string monitor = "inproc://engine-link";
    if (zmq_socket_monitor(in.handle(), monitor.c_str(), ZMQ_EVENT_DISCONNECTED) == 0) {
      engine_link.emplace(context, zmq::socket_type::pair);
      engine_link->connect(monitor);
    }
  }
  auto engine_gone = [&] {
    if (!engine_link) return false;
    zmq::message_t event;
    if (!engine_link->recv(event, zmq::recv_flags::dontwait)) return false;
    zmq::message_t address;
    (void)engine_link->recv(address, zmq::recv_flags::dontwait);
    uint16_t id = 0;
    if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
    return id == ZMQ_EVENT_DISCONNECTED;
  };
  try {
    in.set(zmq::sockopt::linger, 0);
    out.set(zmq::sockopt::linger, 1000);  // let the last reply leave before exit
    out.set(zmq::sockopt::sndtimeo, 5000);  // the engine binds first, so this only expires if it is gone
    in.connect(args.to_worker_endpoint);
    out.connect(args.from_worker_endpoint);
  } catch (const zmq::error_t& e) {
    spdlog::error("{}: cannot connect: {}", args.name, e.what());
    return 1;
  }

  // Heartbeats from a thread of their own (a socket is one thread's), so that a long step does not silence them;
  // stopped and joined when this function returns.
  std::mutex beat_mutex;
  std::condition_variable_any beat_wait;
  std::jthread heart;
  if (args.heartbeat_ms > 0) {
    heart = std::jthread([&](std::stop_token stop) {
      zmq::socket_t beat(context, zmq::socket_type::push);
      beat.set(zmq::sockopt::linger, 0);
      beat.set(zmq::sockopt::sndtimeo, 100);
      beat.connect(args.from_worker_endpoint);
      std::unique_lock lock(beat_mutex);
      do {
        send_envelope(beat, wire::MessageKind::HEARTBEAT, args.name, wire_msg{});
      } while (!beat_wait.wait_for(lock, stop, std::chrono::milliseconds(args.heartbeat_ms),
                                   [&] { return stop.stop_requested(); }));
    });
  }

  // The core runs on this thread: a step costs no hop to another thread inside this process, and the next step,
  // sent ahead by the scheduler, is usually waiting in the socket when this one is done.
  WorkerCore core(ModelRegistry::with_builtins());
  int exit_code = 0;
  bool running = true;
  while (running) {
    auto got = recv_envelope(in, 200);
    if (!got) {
      spdlog::error("{}: {}", args.name, got.error().message);
      continue;
    }
    if (!got->has_value()) {
      if (getppid() != parent) {
        spdlog::error("{}: the engine process went away", args.name);
        exit_code = 1;
        break;
      }
      if (engine_gone()) {
        spdlog::error("{}: the engine's connection closed", args.name);
        exit_code = 1;
        break;
      }
      continue;
    }
    Envelope env = std::move(**got);
    wire::MessageKind reply_kind;
    wire_msg reply;
    switch (env.kind) {
      case wire::MessageKind::SHUTDOWN: running = false; continue;
      case wire::MessageKind::WORKER_INIT:
        reply_kind = wire::MessageKind::WORKER_READY;
        reply = guarded<wire::WorkerReady>([&] { return core.init(env.body); });
        break;
      case wire::MessageKind::EXECUTE_STEP:
        reply_kind = wire::MessageKind::STEP_RESULT;
        reply = guarded<wire::StepResult>([&] { return core.execute(env.body); });
        break;
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
    send_envelope(out, reply_kind, args.name, reply);
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
