// The worker processes of an engine and the endpoints of their links, found through /proc (Linux), for tests that
// check that no worker outlives its engine. An engine in process P starts each worker on its machine as
// `<exe> worker --name ... --to-worker shm:///actord-coll-P-link-<name> ...` (a shared memory link,
// actors/worker_process.cpp; the worker unlinks the segment's name once it mapped it, so while both live the
// segment is seen in their memory maps as "(deleted)") and one a node agent started with tcp:// endpoints. A worker
// is recognised by its command line, so it is found even after P died and it was re-parented.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace actord::test {

// Calls fn(pid, /proc/<pid>) for every process listed now. Advanced with increment(ec): processes come and go
// while /proc is read, and the throwing operator++ would end a caller's thread (a test's driver thread) with an
// exception.
template <class Fn>
void for_each_process(Fn&& fn) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::filesystem::path entry = it->path();
    const std::string name = entry.filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    fn(static_cast<pid_t>(std::stol(name)), entry);
  }
}

// The arguments of a live process (/proc/<pid>/cmdline); empty for one that is gone or a zombie.
inline std::vector<std::string> process_args(const std::filesystem::path& proc_entry) {
  std::ifstream in(proc_entry / "cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  return args;
}

// What every link endpoint of an engine in process engine_pid contains: its shared memory link segments
// ("actord-coll-P-link-"; the '-' keeps P from matching a longer pid).
inline std::string worker_link_tag(pid_t engine_pid) {
  return "actord-coll-" + std::to_string(engine_pid) + "-link-";
}

// How long ago a live process started (/proc/<pid>/stat's start time against /proc/uptime); 0 when unreadable.
inline std::chrono::milliseconds process_age(const std::filesystem::path& proc_entry) {
  std::ifstream stat(proc_entry / "stat"), uptime("/proc/uptime");
  std::string line;
  double up = 0;
  if (!std::getline(stat, line) || !(uptime >> up)) return std::chrono::milliseconds(0);
  const size_t close = line.rfind(')');  // the command's name may hold spaces and parentheses
  if (close == std::string::npos) return std::chrono::milliseconds(0);
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {  // field 22: the start time, in clock ticks after boot
    if (i == 22) {
      const double started = std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
      return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, up - started) * 1000));
    }
  }
  return std::chrono::milliseconds(0);
}

// Live worker processes started by the engine of process engine_pid (those at least min_age old).
inline std::vector<pid_t> worker_processes_of(pid_t engine_pid,
                                              std::chrono::milliseconds min_age = std::chrono::milliseconds(0)) {
  const std::string tag = worker_link_tag(engine_pid);
  std::vector<pid_t> pids;
  for_each_process([&](pid_t pid, const std::filesystem::path& entry) {
    const std::vector<std::string> args = process_args(entry);
    if (args.size() < 2 || args[1] != "worker") return;
    if (min_age.count() > 0 && process_age(entry) < min_age) return;
    for (size_t i = 2; i + 1 < args.size(); ++i) {
      if (args[i] == "--to-worker" && args[i + 1].find(tag) != std::string::npos) {
        pids.push_back(pid);
        break;
      }
    }
  });
  return pids;
}

// The engine's link segments that still exist: names left in /dev/shm, and mappings in the memory of the engine
// process (while it lives) or of any live process (a worker that outlived it). Empty once every link is gone.
inline std::vector<std::string> worker_links_of(pid_t engine_pid) {
  const std::string tag = worker_link_tag(engine_pid);
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (entry.path().filename().string().find(tag) != std::string::npos) found.push_back(entry.path().string());
  }
  for_each_process([&](pid_t pid, const std::filesystem::path& entry) {
    std::ifstream maps(entry / "maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find(tag) != std::string::npos) found.push_back(std::to_string(pid) + ": " + line.substr(line.find('/')));
    }
  });
  return found;
}

// Whether an engine with one worker process has its link up: mapped by both, its name already unlinked.
inline bool link_mapped_by_both(pid_t engine_pid) {
  const std::vector<std::string> links = worker_links_of(engine_pid);
  return links.size() == 2 && std::all_of(links.begin(), links.end(), [](const std::string& l) {
           return l.find("(deleted)") != std::string::npos;
         });
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
