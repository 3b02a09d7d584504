// std::vector whose storage starts on a 64-byte (cache line, one zmm register) boundary. Kernel buffers that are
// read with full-width vector loads use it: from an address 16 bytes past a line (what malloc returns for large
// blocks), every 64-byte load straddles two lines and the micro-kernels slow down by ~10%.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace actord::cpu {

template <class T>
struct CacheAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  CacheAlignedAllocator() = default;
  template <class U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlignment); }
  template <class U>
  bool operator==(const CacheAlignedAllocator<U>&) const noexcept { return true; }
};

template <class T>
using aligned_vector = std::vector<T, CacheAlignedAllocator<T>>;

}  // namespace actord::cpu
