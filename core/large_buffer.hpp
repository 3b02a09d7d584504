// A zero-filled byte buffer for the engine's large arrays (KV cache, rearranged weights), mapped anonymously and
// offered to the kernel as transparent huge pages (MADV_HUGEPAGE): random reads across hundreds of MB (paged
// attention, weight streaming) then miss the TLB far less often. Pages are only backed once written (or populated),
// so resident memory grows with use rather than with the size asked for.
//
// Contract: movable, not copyable; data() is 2 MiB-aligned when size() >= 2 MiB; throws std::bad_alloc when the
// mapping fails. An empty buffer has data() == nullptr.
#pragma once

#include <cstddef>

namespace actord {

class LargeBuffer {
 public:
  LargeBuffer() = default;
  explicit LargeBuffer(size_t size);
  ~LargeBuffer();
  LargeBuffer(LargeBuffer&& other) noexcept;
  LargeBuffer& operator=(LargeBuffer&& other) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;

  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  // Backs every page now (zero-filled, as huge pages where offered), so that the first writes later take no page
  // fault: for a buffer whose writes sit on a hot path (the KV cache, written a token at a time by decode steps,
  // where a fault costs the zeroing of a huge page and, in a VM, the host's first touch: 0.8 s for 512 MiB on the
  // machine this was measured on, paid here instead). Throws std::bad_alloc when the memory cannot be had.
  void populate();

 private:
  void release();
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // the whole mapping (data_ is aligned inside it)
  size_t map_size_ = 0;
};

}  // namespace actord
