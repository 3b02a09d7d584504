#include "core/large_buffer.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <new>
#include <utility>

#include "core/host_memory.hpp"

namespace actord {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

LargeBuffer::LargeBuffer(size_t size) : size_(size) {
  if (size == 0) return;
  // Over-allocate by one huge page so that the data can start on a huge-page boundary.
  map_size_ = size >= kHugePage ? size + kHugePage : size;
  map_ = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::bad_alloc();
  }
  auto start = reinterpret_cast<uintptr_t>(map_);
  if (size >= kHugePage) {
    start = (start + kHugePage - 1) & ~(kHugePage - 1);
    madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
  }
  data_ = reinterpret_cast<unsigned char*>(start);
}

void LargeBuffer::populate() {
  if (size_ == 0) return;
  if (madvise(data_, size_, MADV_POPULATE_WRITE) == 0) return;
  if (errno != EINVAL) throw std::bad_alloc();  // ENOMEM, EFAULT: the pages cannot be had
  // Kernels before 5.14 (no MADV_POPULATE_WRITE): one write per page does the same.
  const size_t page = page_bytes();
  for (size_t i = 0; i < size_; i += page) reinterpret_cast<volatile unsigned char*>(data_)[i] = 0;
}

LargeBuffer::~LargeBuffer() { release(); }

LargeBuffer::LargeBuffer(LargeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)) {}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
  }
  return *this;
}

void LargeBuffer::release() {
  if (map_) munmap(map_, map_size_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = map_size_ = 0;
}

}  // namespace actord
