// Paged KV memory of one worker: `num_blocks` blocks of `block_size` token slots for every layer.
//
// Contract: owned by a worker; which blocks belong to which sequence is decided elsewhere (kv_pool and the
// scheduler's lease) and arrives with every step as block tables. Not thread-safe; the worker's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actord {

class KvCache {
 public:
  KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int row_size() const { return row_; }  // num_kv_heads * head_dim

  // [num_kv_heads * head_dim] floats of the key (value) at `slot` of `block` in `layer`.
  float* key(int layer, uint32_t block, int slot) { return data_.data() + offset(layer, block, slot, 0); }
  float* value(int layer, uint32_t block, int slot) { return data_.data() + offset(layer, block, slot, 1); }

 private:
  size_t offset(int layer, uint32_t block, int slot, int kv) const {
    return ((((static_cast<size_t>(layer) * num_blocks_ + block) * 2 + kv) * block_size_) + slot) * row_;
  }
  int num_layers_, row_, num_blocks_, block_size_;
  std::vector<float> data_;  // [layers, blocks, 2 (k|v), block_size, kv_heads * head_dim]
};

}  // namespace actord
