// How to start a worker in its own process (see worker_process.hpp). Light header: no ZeroMQ, no capnp.
#pragma once

#include <filesystem>
#include <string>

namespace actord {

struct WorkerProcessOptions {
  std::filesystem::path executable;  // the actord binary (runs `actord worker ...`)
  std::string name;                  // stable actor name, e.g. replica/0/worker/0
  std::string log_level = "warn";
};

}  // namespace actord
