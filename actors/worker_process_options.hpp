// How to start a worker in its own process (see worker_process.hpp). Light header: no ZeroMQ, no capnp.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

namespace actord {

struct WorkerProcessOptions {
  std::filesystem::path executable;  // the actord binary (runs `actord worker ...`)
  std::string name;                  // stable actor name, e.g. replica/0/worker/0
  std::string log_level = "warn";
  // The child sends a heartbeat every eighth of this; a child silent for this long is declared failed and killed.
  std::chrono::milliseconds heartbeat_timeout{2000};
  // Which start of this name it is (a replica rebuilt after a failure starts its ranks again): its link is named
  // apart from that of an earlier one that may still be going away.
  uint64_t incarnation = 0;
  // Empty: a child of this process. Else tcp://HOST:PORT of the node agent (actors/node_agent.hpp) that starts the
  // worker on its machine: the link is two tcp sockets on this machine's address toward it, and the agent is asked
  // for the worker's liveness and to kill it.
  std::string node_agent;
};

}  // namespace actord
