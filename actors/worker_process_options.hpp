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
  std::filesystem::path ipc_dir;     // the engine's private ipc folder (comms/ipc_directory.hpp); required
};

}  // namespace actord
