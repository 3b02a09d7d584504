// A named POSIX shared memory segment (shm_open + mmap), mapped read-write.
//
// Contract: create() makes a new segment of `bytes` (zero-filled; fails if the name exists) and open() maps an
// existing one, waiting until its creator has sized it (up to a deadline); an open() of a segment of another size
// is an Error naming both sizes. The mapping lives as long as the object; the name lives until unlink() (call it
// as soon as every user has mapped the segment: the memory then goes away with the last mapping, even if every
// process is killed). remove_stale() unlinks the segments "actord-coll-<pid>-*" of this user whose pid is gone.
// Errors name the segment and the cause. Linux only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "core/status.hpp"

namespace actord::coll {

class ShmSegment {
 public:
  static Result<ShmSegment> create(const std::string& name, size_t bytes);
  static Result<ShmSegment> open(const std::string& name, size_t bytes, std::chrono::steady_clock::time_point deadline);
  // Unlinks every "/actord-coll-<pid>-*" of this user whose process no longer exists; returns how many.
  static size_t remove_stale();
  // Unlinks every "/actord-coll-<owner>-*" of this user (a process cleaning up after itself on a signal).
  static size_t remove_all_of(pid_t owner);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  void unlink();  // removes the name (idempotent); the mapping stays

 private:
  ShmSegment(std::string name, std::byte* data, size_t size) : name_(std::move(name)), data_(data), size_(size) {}
  std::string name_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool linked_ = true;
};

}  // namespace actord::coll
