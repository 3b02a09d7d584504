// A free list of KV block ids. Used by the kv_pool actor for the whole pool and by a scheduler for the blocks it
// holds on lease.
//
// Contract: allocate() hands out ids it was given (add()) and not yet freed; it returns false, changing nothing,
// when fewer than n are free. free() of an id that is not allocated is a bug (CHECK). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actord {

class BlockAllocator {
 public:
  BlockAllocator() = default;
  explicit BlockAllocator(uint32_t num_blocks);  // owns ids 0..num_blocks-1

  void add(const std::vector<uint32_t>& ids);     // takes ownership of more ids (e.g. a lease grant)
  bool allocate(size_t n, std::vector<uint32_t>& out);  // appends n ids to out
  void free(const std::vector<uint32_t>& ids);
  // Removes up to n free ids from this allocator and returns them (to give back a lease).
  std::vector<uint32_t> take_free(size_t n);

  size_t num_free() const { return free_.size(); }
  size_t num_total() const { return total_; }

 private:
  std::vector<uint32_t> free_;      // stack: the most recently freed block is reused first
  std::vector<uint8_t> in_use_;     // [max id + 1]
  size_t total_ = 0;
};

}  // namespace actord
