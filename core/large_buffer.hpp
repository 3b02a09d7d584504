// A zero-filled byte buffer for the engine's large arrays (KV cache, rearranged weights), mapped anonymously and
// offered to the kernel as transparent huge pages (MADV_HUGEPAGE): random reads across hundreds of MB (paged
// attention, weight streaming) then miss the TLB far less often. Pages are only backed once written (or populated),
// so resident memory grows with use rather than with the size asked for.
//
// Contract: movable, not copyable; data() is 2 MiB-aligned when size() >= 2 MiB; throws std::bad_alloc when the
// mapping fails. An empty buffer has data() == nullptr.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>

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
  // Backs every page (zero-filled, as huge pages where offered) from a thread of its own, so that later first writes
  // take no page faults: for a buffer whose writes sit on a hot path (the KV cache, written a token at a time by
  // decode steps). The buffer may be used meanwhile (pages are faulted in, never written: MADV_POPULATE_WRITE); the
  // kernel's compaction for huge pages may take a while, which no caller waits for. Where the kernel lacks it
  // (before 5.14) or the memory cannot be had, pages stay backed on first write. Destruction stops the thread.
  void populate_in_background();
  // Returns once the background population has finished (tests).
  void wait_populated();

 private:
  void release();
  std::unique_ptr<std::atomic<bool>> stop_populating_;  // set to end the populating thread early
  std::thread populating_;
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // the whole mapping (data_ is aligned inside it)
  size_t map_size_ = 0;
};

}  // namespace actord
