#include "actors/worker_process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/shm_envelope.hpp"
#include "actors/worker_launch.hpp"

namespace actord {

std::chrono::milliseconds WorkerProcess::heartbeat_interval(const WorkerProcessOptions& options) {
  return std::clamp(options.heartbeat_timeout / 8, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
}

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::start(const WorkerProcessOptions& options,
                                                            MessageHandler on_message, ExitHandler on_exit) {
  std::unique_ptr<WorkerProcess> wp(new WorkerProcess());
  wp->options_ = options;
  wp->on_message_ = std::move(on_message);
  wp->on_exit_ = std::move(on_exit);
  const bool remote = !options.node_agent.empty();
  if (remote) {
    wp->agent_ = std::make_unique<NodeAgentClient>(options.node_agent, std::chrono::milliseconds(2000));
    auto here = local_address_toward(wp->agent_->host());
    if (!here) return here.error();
    wp->to_endpoint_ = "tcp://" + *here + ":*";
    wp->from_endpoint_ = wp->to_endpoint_;
  } else {
    // A worker on this machine: a shared memory link (no ZeroMQ I/O threads between the two ends).
    std::string tag = options.name;
    if (options.incarnation > 0) tag += ".g" + std::to_string(options.incarnation);
    auto link = coll::ShmLink::create(coll::ShmLink::segment_name(getpid(), tag));
    if (!link.ok()) return make_error(link.error().code, "worker process " + options.name + ": " + link.error().message);
    wp->link_.emplace(std::move(*link));
    wp->to_endpoint_ = std::string(kShmScheme) + wp->link_->name();
    wp->from_endpoint_ = wp->to_endpoint_;
  }
  if (remote) {
    try {
      wp->to_worker_ = zmq::socket_t(wp->context_, zmq::socket_type::push);
      wp->to_worker_.set(zmq::sockopt::linger, 0);
      wp->to_worker_.set(zmq::sockopt::sndtimeo, 20);
      wp->to_worker_.bind(wp->to_endpoint_);
      wp->from_worker_ = zmq::socket_t(wp->context_, zmq::socket_type::pull);
      wp->from_worker_.set(zmq::sockopt::linger, 0);
      wp->from_worker_.bind(wp->from_endpoint_);
      wp->to_endpoint_ = wp->to_worker_.get(zmq::sockopt::last_endpoint);  // the ports the system gave
      wp->from_endpoint_ = wp->from_worker_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return make_error(Errc::internal, "cannot bind worker sockets: " + std::string(e.what()));
    }
  }
  // Started here (a child of this process) or by the node's agent on its machine.
  auto pid = remote ? wp->agent_->spawn(options.name, wp->to_endpoint_, wp->from_endpoint_, options.log_level,
                                        static_cast<uint32_t>(heartbeat_interval(options).count()))
                    : launch_worker({options.executable, options.name, wp->to_endpoint_, wp->from_endpoint_,
                                     options.log_level, heartbeat_interval(options).count()});
  if (!pid) return pid.error();
  wp->pid_ = *pid;
  wp->receiver_ = std::thread([p = wp.get()] { p->receive_loop(); });
  return wp;
}

void WorkerProcess::kill() {
  if (pid_ > 0 && !exited_.load()) kill_child();
}

void WorkerProcess::kill_child() {
  if (!agent_) {
    ::kill(pid_, SIGKILL);
    return;
  }
  if (auto done = agent_->kill(pid_); !done) spdlog::warn("{}", done.error().message);
}

std::optional<std::string> WorkerProcess::check_exit() {
  if (!agent_) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) return describe_exit(status);
    return std::nullopt;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < next_agent_check_) return std::nullopt;
  next_agent_check_ = now + std::chrono::milliseconds(250);
  auto state = agent_->status(pid_);
  if (!state) {
    if (++agent_misses_ < 2) return std::nullopt;
    return "worker process " + options_.name + " (pid " + std::to_string(pid_) + " on " + agent_->address() +
           ") is lost: " + state.error().message;
  }
  agent_misses_ = 0;
  if (state->running) return std::nullopt;
  return state->exit;
}

bool WorkerProcess::send(wire::MessageKind kind, const wire_msg& body) {
  if (link_) {
    // Waits only while the ring is full (a large KV import while the worker computes); gives up when the child ends.
    const auto sent = send_envelope(*link_, kind, body, coll::ShmLink::Clock::now() + std::chrono::minutes(10),
                                    [this]() -> std::optional<Error> {
                                      if (exited_.load() || stopping_.load())
                                        return make_error(Errc::worker_failed, "worker process " + options_.name + " ended");
                                      return std::nullopt;
                                    });
    return sent.ok();
  }
  // A PUSH socket holds a message only once its peer has connected: retry in short slices while the child lives.
  while (!exited_.load() && !stopping_.load()) {
    if (send_envelope(to_worker_, kind, options_.name, body)) return true;
  }
  return false;
}

std::string WorkerProcess::describe_exit(int status) const {
  std::string who = "worker process " + options_.name + " (pid " + std::to_string(pid_) + ")";
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code == 127) return who + " could not execute " + options_.executable.string();
    return who + " exited with status " + std::to_string(code);
  }
  if (WIFSIGNALED(status)) return who + " was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return who + " stopped";
}

void WorkerProcess::receive_loop() {
  using clock = std::chrono::steady_clock;
  auto last_heard = clock::now();  // the child beats from its first moments, model loading included
  bool heard = false;              // until then it may still be starting: kStartSilence at least
  auto silence_allowed = [&] {
    return heard ? options_.heartbeat_timeout
                 : std::max<std::chrono::milliseconds>(options_.heartbeat_timeout, kStartSilence);
  };
  auto hear = [&] {
    last_heard = clock::now();
    heard = true;
  };
  auto deliver = [&](Envelope env) {
    hear();
    if (env.kind != wire::MessageKind::HEARTBEAT) on_message_(std::move(env));
  };
  uint64_t beats = 0;
  // A shared memory link's wait ends when we stop, or when the child went silent or ended (seen without reaping it:
  // check_exit() does that), so that a child killed half-way through a message cannot hold this thread.
  auto give_up = [&]() -> std::optional<Error> {
    if (stopping_.load()) return make_error(Errc::worker_failed, "stopping");
    if (const uint64_t b = link_->beats(); b != beats) {  // its heartbeat is a counter
      beats = b;
      hear();
    }
    if (clock::now() - last_heard > silence_allowed()) {
      return make_error(Errc::worker_failed, "worker process " + options_.name + " went silent");
    }
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) {
      return make_error(Errc::worker_failed, "worker process " + options_.name + " ended");
    }
    return std::nullopt;
  };
  // What the child sent before it ended: whole messages only (a message that fits the ring is published at once),
  // so any wait means there is no more.
  auto never_wait = []() -> std::optional<Error> { return make_error(Errc::worker_failed, "nothing more"); };
  auto receive = [&](int wait_ms) -> Result<std::optional<Envelope>> {
    if (!link_) return recv_envelope(from_worker_, wait_ms);
    if (wait_ms == 0) return recv_envelope(*link_, std::chrono::milliseconds(0), never_wait);
    return recv_envelope(*link_, std::chrono::milliseconds(wait_ms), give_up);
  };
  while (!stopping_.load()) {
    auto got = receive(20);
    if (!got.ok() && got.error().code == Errc::parse_error) spdlog::warn("{}: {}", options_.name, got.error().message);
    if (got.ok() && got->has_value()) deliver(std::move(**got));
    if (!exited_.load() && silence_reason_.empty() && clock::now() - last_heard > silence_allowed()) {
      // Stopped (SIGSTOP), frozen or starved: declared failed, and killed so that it cannot come back half-way.
      const auto silent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - last_heard);
      silence_reason_ = "worker process " + options_.name + " (pid " + std::to_string(pid_) +
                        ") stopped answering: no heartbeat for " + std::to_string(silent_ms.count()) +
                        " ms (engine.step_timeout " + std::to_string(options_.heartbeat_timeout.count()) +
                        " ms); killed it";
      kill_child();
    }
    std::optional<std::string> ended;
    if (!exited_.load() && (ended = check_exit())) {
      exited_.store(true);
      // Deliver what the child sent before it died (e.g. its WorkerReady with an error), then report the exit.
      for (;;) {
        auto rest = receive(0);
        if (!rest.ok() || !rest->has_value()) break;
        deliver(std::move(**rest));
      }
      if (!stopping_.load()) on_exit_(silence_reason_.empty() ? *ended : silence_reason_);
      return;
    }
  }
}

WorkerProcess::~WorkerProcess() {
  if (!exited_.load() && link_) {
    (void)send_envelope(*link_, wire::MessageKind::SHUTDOWN, wire_msg{}, coll::ShmLink::Clock::now() + std::chrono::seconds(1),
                        [this]() -> std::optional<Error> {
                          if (exited_.load()) return make_error(Errc::worker_failed, "ended");
                          return std::nullopt;
                        });
  } else if (!exited_.load()) {
    try {
      send_envelope(to_worker_, wire::MessageKind::SHUTDOWN, options_.name, wire_msg{});
    } catch (const zmq::error_t&) {
    }
  }
  stopping_.store(true);
  if (receiver_.joinable()) receiver_.join();
  if (!exited_.load() && pid_ > 0 && agent_) {
    bool ended = false;
    for (int i = 0; i < 40 && !ended; ++i) {
      auto state = agent_->status(pid_);
      ended = !state || !state->running;
      if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!ended) kill_child();
  } else if (!exited_.load() && pid_ > 0) {
    int status = 0;
    bool reaped = false;
    for (int i = 0; i < 200 && !reaped; ++i) {
      reaped = waitpid(pid_, &status, WNOHANG) == pid_;
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!reaped) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  to_worker_.close();
  from_worker_.close();
  if (link_) link_->unlink();  // the worker unlinks it once mapped; this covers one that never got that far
}

}  // namespace actord
