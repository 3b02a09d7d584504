// The body of `actord worker`: a worker actor in its own process, fed over ZeroMQ by a WorkerProcess in the engine.
//
// Contract: connects to the two endpoints, runs WorkerInit/ExecuteStep envelopes through a worker actor one at a
// time and sends each reply back, until a Shutdown envelope arrives or the parent process goes away. Returns the
// process exit code: 0 after a clean shutdown, 3 when the model failed to load (the error was already sent to the
// engine in WorkerReady), 1 on a transport failure. With heartbeat_ms, a thread of its own sends an empty Heartbeat
// envelope that often (on its own socket to the same endpoint) for as long as the process runs, so the engine can
// tell a stopped or frozen process from one busy with a long step.
#pragma once

#include <string>

namespace actord {

struct WorkerProcessArgs {
  std::string name;
  std::string to_worker_endpoint;    // PULL side here
  std::string from_worker_endpoint;  // PUSH side here
  int heartbeat_ms = 0;              // > 0: a Heartbeat envelope this often, from its own thread, also mid-step
};

int run_worker_process(const WorkerProcessArgs& args);

}  // namespace actord
