#include "memory/block_allocator.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace actord {

BlockAllocator::BlockAllocator(uint32_t num_blocks) {
  std::vector<uint32_t> ids(num_blocks);
  for (uint32_t i = 0; i < num_blocks; ++i) ids[i] = num_blocks - 1 - i;  // so that block 0 is handed out first
  add(ids);
}

void BlockAllocator::add(const std::vector<uint32_t>& ids) {
  for (uint32_t id : ids) {
    if (id >= in_use_.size()) in_use_.resize(id + 1, 2);  // 2 = not owned by this allocator
    ACTORD_CHECK_MSG(in_use_[id] == 2, "block id added twice");
    in_use_[id] = 0;
    free_.push_back(id);
  }
  total_ += ids.size();
}

bool BlockAllocator::allocate(size_t n, std::vector<uint32_t>& out) {
  if (n > free_.size()) return false;
  for (size_t i = 0; i < n; ++i) {
    uint32_t id = free_.back();
    free_.pop_back();
    in_use_[id] = 1;
    out.push_back(id);
  }
  return true;
}

void BlockAllocator::free(const std::vector<uint32_t>& ids) {
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    ACTORD_CHECK_MSG(*it < in_use_.size() && in_use_[*it] == 1, "freeing a block that is not allocated");
    in_use_[*it] = 0;
    free_.push_back(*it);
  }
}

std::vector<uint32_t> BlockAllocator::take_free(size_t n) {
  n = std::min(n, free_.size());
  std::vector<uint32_t> out(free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
  free_.resize(free_.size() - n);
  for (uint32_t id : out) in_use_[id] = 2;
  total_ -= n;
  return out;
}

}  // namespace actord
