// A worker that lives in its own OS process, seen from the engine's process: starts it (fork + exec of
// `actord worker`), owns its link to it (shared memory, comms/collectives/shm_link.hpp), and reaps it.
//
// Contract: start() makes the link (or binds the sockets) and launches the child, which dies with us (PR_SET_PDEATHSIG) so no orphan is
// left even if this process is killed. send() may be called from one thread at a time (the proxy actor's). The
// receive loop runs on its own thread and reports through callbacks: on_message for every envelope, on_exit once
// when the child has exited (with a human-readable reason). A child that sends nothing, not even its heartbeat, for
// options.heartbeat_timeout is declared failed: killed (SIGKILL), and on_exit says it stopped answering; until its
// first beat the silence allowed is kStartSilence at least (exec and the loading of its shared libraries, CUDA's
// among them, take ~0.4 s alone and seconds on a loaded machine). The destructor asks the child to shut down, waits up to
// two seconds, then kills it, and joins the receive thread. Linux only. With options.node_agent the worker runs on
// another machine, started by that node's agent: two ZeroMQ tcp sockets instead, and its end is learnt from the agent
// (asked every 250 ms; an agent that does not answer twice in a row counts as the worker's end) or its silence.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "actors/node_agent.hpp"
#include "actors/worker_process_options.hpp"
#include "comms/collectives/shm_link.hpp"
#include "comms/zmq_link.hpp"

namespace actord {

class WorkerProcess {
 public:
  using MessageHandler = std::function<void(Envelope)>;
  using ExitHandler = std::function<void(const std::string& reason)>;

  static Result<std::unique_ptr<WorkerProcess>> start(const WorkerProcessOptions& options, MessageHandler on_message,
                                                      ExitHandler on_exit);
  ~WorkerProcess();

  // Waits until the child has connected (it may still be starting); false once the child has exited.
  bool send(wire::MessageKind kind, const wire_msg& body);
  pid_t pid() const { return pid_; }
  // Kills the child now (SIGKILL), for one declared failed; the receive thread reaps it. Any thread.
  void kill();
  // The silence allowed before the child's first beat or message, when options.heartbeat_timeout is shorter.
  static constexpr std::chrono::seconds kStartSilence{10};
  // How often the child beats: an eighth of options.heartbeat_timeout, between 10 and 250 ms.
  static std::chrono::milliseconds heartbeat_interval(const WorkerProcessOptions& options);
  const std::string& name() const { return options_.name; }

 private:
  WorkerProcess() = default;
  void receive_loop();
  std::string describe_exit(int status) const;
  // Whether the child has ended, and how: waitpid for a local one, the agent for a remote one.
  std::optional<std::string> check_exit();
  void kill_child();

  WorkerProcessOptions options_;
  std::optional<coll::ShmLink> link_;  // a worker on this machine: shared memory
  zmq::context_t context_{1};  // a worker on another node (tcp):
  zmq::socket_t to_worker_;    // PUSH, bound here
  zmq::socket_t from_worker_;  // PULL, bound here; used by the receive thread only
  std::string to_endpoint_, from_endpoint_;
  pid_t pid_ = -1;
  std::unique_ptr<NodeAgentClient> agent_;  // a remote worker's node agent
  int agent_misses_ = 0;
  std::chrono::steady_clock::time_point next_agent_check_{};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> exited_{false};
  std::string silence_reason_;  // set (receive thread only) when the child went silent and was killed
  MessageHandler on_message_;
  ExitHandler on_exit_;
  std::thread receiver_;
};

}  // namespace actord
