// Paged KV memory of one worker: `num_blocks` blocks of `block_size` token slots for every layer, stored as f32,
// bf16 or f16 (rows arrive in f32 and are rounded to nearest even on write).
//
// Contract: owned by a worker; which blocks belong to which sequence is decided elsewhere (kv_pool and the
// scheduler's lease) and arrives with every step as block tables. Not thread-safe; the worker's thread only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "core/large_buffer.hpp"

namespace actord {

class KvCache {
 public:
  KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size, DType dtype = DType::f32);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int row_size() const { return row_; }  // num_kv_heads * head_dim

  int head_dim() const { return head_dim_; }
  DType dtype() const { return dtype_; }

  // Stores one token's K and V rows ([num_kv_heads * head_dim] each) at `slot` of `block` in `layer`.
  void write(int layer, uint32_t block, int slot, const float* k_row, const float* v_row);

  // Layer bases and strides for attention (PagedAttentionParams): the row of kv head g at slot s of block b is at
  // keys(layer) + b * block_stride() + g * head_stride() + s * head_dim() elements of dtype(); values likewise
  // from values(layer).
  const void* keys(int layer) const { return data_.data() + offset(layer, 0, 0, 0) * dtype_size(dtype_); }
  const void* values(int layer) const { return data_.data() + offset(layer, 0, 1, 0) * dtype_size(dtype_); }
  void* keys(int layer) { return data_.data() + offset(layer, 0, 0, 0) * dtype_size(dtype_); }
  void* values(int layer) { return data_.data() + offset(layer, 0, 1, 0) * dtype_size(dtype_); }
  int64_t block_stride() const { return 2ll * num_kv_heads_ * block_size_ * head_dim_; }
  int64_t head_stride() const { return static_cast<int64_t>(block_size_) * head_dim_; }

  int num_layers() const { return num_layers_; }
  int num_kv_heads() const { return num_kv_heads_; }
  // Bytes of one block over every layer: what a swap, a copy or an export moves per block.
  size_t block_bytes() const { return static_cast<size_t>(num_layers_) * layer_block_bytes(); }
  // Whether `other` stores blocks with the same shape and dtype (blocks can move between the two byte for byte).
  bool same_layout(const KvCache& other) const;
  // Copies block `src` of this cache, every layer, to block `dst` of `to` (this cache itself, or another one with
  // the same layout, e.g. a host swap space). Byte-exact.
  void copy_block(uint32_t src, KvCache& to, uint32_t dst) const;
  // Block `block`'s bytes, every layer, to `out` [block_bytes()] in the order layer, k|v, kv head, slot, dim; and
  // back. The export / import format of a block.
  void read_block(uint32_t block, unsigned char* out) const;
  void write_block(uint32_t block, const unsigned char* in);

 private:
  size_t offset(int layer, uint32_t block, int kv, int head) const {
    return (((static_cast<size_t>(layer) * num_blocks_ + block) * 2 + kv) * num_kv_heads_ + head) *
           static_cast<size_t>(block_size_) * head_dim_;
  }
  size_t layer_block_bytes() const { return static_cast<size_t>(block_stride()) * dtype_size(dtype_); }
  int num_layers_, num_kv_heads_, head_dim_, row_, num_blocks_, block_size_;
  DType dtype_;
  // [layers, blocks, 2 (k|v), kv_heads, block_size, head_dim] elements of dtype_: one head's keys in a block are
  // contiguous. Huge pages: attention reads blocks scattered over the whole cache.
  LargeBuffer data_;
};

}  // namespace actord
