// The worker processes of an engine and the sockets of their links, found through /proc (Linux), for tests that
// check that no worker outlives its engine. An engine in process P starts each worker as
// `<exe> worker --name ... --to-worker ipc://.../actord-P-XXXXXX/... --from-worker ...` and binds both endpoints
// (actors/worker_process.cpp, in the private folder of comms/ipc_directory.hpp): a worker is recognised by its
// command line, so it is found even after P died and it was re-parented, and the bound sockets (and the
// connections accepted on them) by their names in /proc/net/unix.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace actord::test {

// The arguments of a live process (/proc/<pid>/cmdline); empty for one that is gone or a zombie.
inline std::vector<std::string> process_args(const std::filesystem::path& proc_entry) {
  std::ifstream in(proc_entry / "cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  return args;
}

// What every link endpoint of an engine in process engine_pid contains ("actord-P-"; the '-' keeps P from
// matching a longer pid).
inline std::string worker_link_tag(pid_t engine_pid) { return "actord-" + std::to_string(engine_pid) + "-"; }

// Live worker processes started by the engine of process engine_pid.
inline std::vector<pid_t> worker_processes_of(pid_t engine_pid) {
  const std::string tag = worker_link_tag(engine_pid);
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::vector<std::string> args = process_args(entry.path());
    if (args.size() < 2 || args[1] != "worker") continue;
    for (size_t i = 2; i + 1 < args.size(); ++i) {
      if (args[i] == "--to-worker" && args[i + 1].find(tag) != std::string::npos) {
        pids.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
    }
  }
  return pids;
}

// Unix sockets whose name is one of the engine's link endpoints (abstract names are listed with a leading '@'):
// the listening sockets the engine bound and the connections it accepted on them.
inline std::vector<std::string> worker_sockets_of(pid_t engine_pid) {
  const std::string tag = worker_link_tag(engine_pid);
  std::ifstream in("/proc/net/unix");
  std::vector<std::string> names;
  std::string line;
  std::getline(in, line);  // Num RefCount Protocol Flags Type St Inode Path
  while (std::getline(in, line)) {
    const size_t at = line.find(tag);
    if (at == std::string::npos) continue;
    const size_t start = line.rfind(' ', at) + 1;
    names.push_back(line.substr(start));
  }
  return names;
}

// Polls `done` every 10 ms until it holds or `limit` passed; whether it held. For events another process causes
// (a worker dying after its parent), which a test can only wait for.
template <class Pred>
bool eventually(Pred&& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace actord::test
