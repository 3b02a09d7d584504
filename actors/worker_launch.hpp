// Starting an `actord worker` process: shared by the engine (placement: process) and a node agent (ranks on its
// node), so both start the same command the same way.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

#include "core/status.hpp"

namespace actord {

struct WorkerCommand {
  std::filesystem::path executable;  // the actord binary
  std::string name;                  // the rank's name
  std::string to_worker;             // ZeroMQ endpoints the engine bound
  std::string from_worker;
  std::string log_level;
  int64_t heartbeat_ms = 0;
};

// fork + exec of `executable worker --name ... --heartbeat-ms ...`. The child dies with the calling process
// (PR_SET_PDEATHSIG) and keeps only stdin, stdout and stderr of its descriptors; only async-signal-safe calls
// happen between fork and exec. Returns the child's pid, or an Error when fork fails.
Result<pid_t> launch_worker(const WorkerCommand& command);

}  // namespace actord
