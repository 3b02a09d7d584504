#include "comms/ipc_directory.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

namespace actord {
namespace {

constexpr std::string_view kPrefix = "actord-";

// The pid in a folder name `actord-<pid>-XXXXXX`, or nothing for any other name.
std::optional<pid_t> pid_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(first, last, pid);
  if (ec != std::errc{} || end == first || end == last || *end != '-' || pid <= 0) return std::nullopt;
  return pid;
}

template <class Pred>
size_t remove_matching(const std::filesystem::path& base, Pred&& pred) {
  std::error_code ec;
  size_t removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const auto pid = pid_of(entry.path().filename().string());
    if (!pid || !entry.is_directory(ec) || !pred(*pid, entry.path())) continue;
    if (std::filesystem::remove_all(entry.path(), ec) > 0 && !ec) ++removed;
  }
  return removed;
}

}  // namespace

Result<std::unique_ptr<IpcDirectory>> IpcDirectory::create(const std::filesystem::path& base) {
  remove_stale(base);
  std::string pattern = (base / (std::string(kPrefix) + std::to_string(getpid()) + "-XXXXXX")).string();
  if (pattern.size() + 16 > 107) {
    return make_error(Errc::invalid_argument,
                      "ipc folder " + base.string() + ": too long a path for socket names (at most ~90 bytes)");
  }
  if (mkdtemp(pattern.data()) == nullptr) {
    return make_error(Errc::internal, "cannot create a private ipc folder in " + base.string() + ": " +
                                          std::strerror(errno));
  }
  return std::unique_ptr<IpcDirectory>(new IpcDirectory(pattern));
}

IpcDirectory::~IpcDirectory() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

size_t IpcDirectory::remove_all_of(const std::filesystem::path& base, pid_t pid) {
  return remove_matching(base, [&](pid_t owner, const std::filesystem::path&) { return owner == pid; });
}

size_t IpcDirectory::remove_stale(const std::filesystem::path& base) {
  return remove_matching(base, [](pid_t owner, const std::filesystem::path& path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || st.st_uid != geteuid()) return false;  // someone else's: not ours to judge
    return kill(owner, 0) != 0 && errno == ESRCH;
  });
}

}  // namespace actord
