#include "core/large_buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <utility>

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

void LargeBuffer::populate_in_background() {
  if (size_ == 0 || populating_.joinable()) return;
  stop_populating_ = std::make_unique<std::atomic<bool>>(false);
  populating_ = std::thread([data = data_, size = size_, stop = stop_populating_.get()] {
    for (size_t at = 0; at < size && !stop->load(std::memory_order_relaxed); at += kHugePage) {
      if (madvise(data + at, std::min(kHugePage, size - at), MADV_POPULATE_WRITE) != 0) return;
    }
  });
}

void LargeBuffer::wait_populated() {
  if (populating_.joinable()) populating_.join();
}

LargeBuffer::~LargeBuffer() { release(); }

LargeBuffer::LargeBuffer(LargeBuffer&& other) noexcept
    : stop_populating_(std::move(other.stop_populating_)),
      populating_(std::move(other.populating_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)) {}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& other) noexcept {
  if (this != &other) {
    release();
    stop_populating_ = std::move(other.stop_populating_);
    populating_ = std::move(other.populating_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
  }
  return *this;
}

void LargeBuffer::release() {
  if (populating_.joinable()) {
    stop_populating_->store(true, std::memory_order_relaxed);
    populating_.join();
  }
  if (map_) munmap(map_, map_size_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = map_size_ = 0;
}

}  // namespace actord
