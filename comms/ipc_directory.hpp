// A private folder for one engine's ZeroMQ ipc endpoints (the sockets between it and its worker processes).
//
// Contract: create(base) makes `base/actord-<pid>-XXXXXX` with mode 0700 (mkdtemp), so only this user can reach
// the sockets in it; first it removes the folders of that name whose process is gone (a run killed with SIGKILL
// cannot clean up after itself: the next start does). The destructor removes the folder and whatever is in it;
// remove_all_of(base, pid) does the same for every folder of process `pid`, for a signal handler's thread that ends
// the process without running destructors. endpoint("x") is "ipc://<folder>/x"; names must be short (a socket path
// has at most 107 bytes). Errors name the folder and the cause. Linux only.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/status.hpp"

namespace actord {

class IpcDirectory {
 public:
  static Result<std::unique_ptr<IpcDirectory>> create(const std::filesystem::path& base);
  ~IpcDirectory();
  IpcDirectory(const IpcDirectory&) = delete;
  IpcDirectory& operator=(const IpcDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string endpoint(const std::string& name) const { return "ipc://" + (path_ / name).string(); }

  // Removes every `actord-<pid>-*` folder in base; returns how many.
  static size_t remove_all_of(const std::filesystem::path& base, pid_t pid);
  // Removes the `actord-<pid>-*` folders in base of processes that no longer exist and belong to this user.
  static size_t remove_stale(const std::filesystem::path& base);

 private:
  explicit IpcDirectory(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

}  // namespace actord
