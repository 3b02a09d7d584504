#include "comms/collectives/shm_segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <thread>

namespace actord::coll {
namespace {

constexpr std::string_view kPrefix = "actord-coll-";

Error sys_error(Errc code, const std::string& what, const std::string& name) {
  return make_error(code, what + " shared memory segment " + name + ": " + std::strerror(errno));
}

Result<std::byte*> map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return sys_error(Errc::out_of_memory, "cannot map", name);
  return static_cast<std::byte*>(p);
}

}  // namespace

Result<ShmSegment> ShmSegment::create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return sys_error(Errc::internal, "cannot create", name);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Error e = sys_error(Errc::resource_exhausted, "cannot size (" + std::to_string(bytes) + " bytes)", name);
    close(fd);
    shm_unlink(name.c_str());
    return e;
  }
  Result<std::byte*> p = map(fd, bytes, name);
  close(fd);
  if (!p.ok()) {
    shm_unlink(name.c_str());
    return p.error();
  }
  return ShmSegment(name, *p, bytes);
}

Result<ShmSegment> ShmSegment::open(const std::string& name, size_t bytes,
                                    std::chrono::steady_clock::time_point deadline) {
  // The creator makes the name, then sizes it: wait for both.
  for (;;) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0 && errno != ENOENT) return sys_error(Errc::internal, "cannot open", name);
    if (fd >= 0) {
      struct stat st {};
      if (fstat(fd, &st) != 0) {
        Error e = sys_error(Errc::internal, "cannot stat", name);
        close(fd);
        return e;
      }
      if (st.st_size != 0) {
        if (static_cast<size_t>(st.st_size) != bytes) {
          close(fd);
          return make_error(Errc::invalid_argument, "shared memory segment " + name + " has " +
                                                        std::to_string(st.st_size) + " bytes, this rank expects " +
                                                        std::to_string(bytes) +
                                                        " (the ranks' specs differ in size, slot_bytes or "
                                                        "channel_bytes)");
        }
        Result<std::byte*> p = map(fd, bytes, name);
        close(fd);
        if (!p.ok()) return p.error();
        return ShmSegment(name, *p, bytes);
      }
      close(fd);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return make_error(Errc::worker_failed, "shared memory segment " + name +
                                                 " was not created in time (rank 0 "
                                                 "did not join)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

namespace {

// Unlinks this user's "/actord-coll-<pid>-*" segments whose pid `doomed` picks; returns how many.
template <class Doomed>
size_t remove_segments_of(Doomed&& doomed) {
  size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(kPrefix, 0) != 0) continue;
    const char* first = file.data() + kPrefix.size();
    const char* last = file.data() + file.size();
    pid_t pid = 0;
    const auto [end, err] = std::from_chars(first, last, pid);
    if (err != std::errc{} || end == first || end == last || *end != '-' || pid <= 0) continue;
    struct stat st {};
    if (stat(entry.path().c_str(), &st) != 0 || st.st_uid != geteuid()) continue;
    if (!doomed(pid)) continue;
    if (shm_unlink(("/" + file).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace

size_t ShmSegment::remove_stale() {
  return remove_segments_of([](pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; });
}

size_t ShmSegment::remove_all_of(pid_t owner) {
  return remove_segments_of([owner](pid_t pid) { return pid == owner; });
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)), data_(other.data_), size_(other.size_), linked_(other.linked_) {
  other.data_ = nullptr;
  other.linked_ = false;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    linked_ = other.linked_;
    other.data_ = nullptr;
    other.linked_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
}

void ShmSegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());
}

}  // namespace actord::coll
