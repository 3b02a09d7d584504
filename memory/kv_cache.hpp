// Paged KV memory of one worker: `num_blocks` blocks of `block_size` token slots for every layer, stored as f32,
// bf16, f16 or int8 codes with a scale per row (core/kv_rows.hpp; the executor backend's primitives write them:
// Backend::rope_and_store_kv).
//
// Contract: owned by a worker; which blocks belong to which sequence is decided elsewhere (kv_pool and the
// scheduler's lease) and arrives with every step as block tables. Not thread-safe; the worker's thread only. The
// bytes live in host memory (huge pages), or in a device's memory given as a KvStorage (a GPU backend's): then
// keys()/values() are device addresses for the backend's kernels, and block copies, exports and imports go through
// the storage's copy function (host <-> device, device <-> device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/dtype.hpp"
#include "core/kv_rows.hpp"
#include "core/large_buffer.hpp"

namespace actord {

// Memory for a KvCache that is not the host's: `bytes()` bytes at `data` (zeroed), kept alive by `owner`, and a
// copy that takes host or device addresses on either side.
struct KvStorage {
  unsigned char* data = nullptr;
  std::shared_ptr<void> owner;
  std::function<void(void* dst, const void* src, size_t n)> copy;
};

class KvCache {
 public:
  // In host memory, or with `storage` (of bytes_for(...) bytes) in a device's.
  KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size, DType dtype = DType::f32,
          KvStorage storage = {});
  static size_t bytes_for(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size, DType dtype);
  bool on_host() const { return storage_.data == nullptr; }
  // Backs the whole host pool with memory now (LargeBuffer::populate), as engines that zero their KV cache up front
  // do, so that decode steps writing a token at a time into fresh blocks take no page faults; throws
  // std::bad_alloc. Nothing on a device.
  void populate() {
    if (on_host()) data_.populate();
  }

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int row_size() const { return row_; }  // num_kv_heads * head_dim

  int head_dim() const { return head_dim_; }
  DType dtype() const { return dtype_; }

  // Layer bases and strides for attention (PagedAttentionParams): the row of kv head g at slot s of block b is at
  // keys(layer) + b * block_stride() + g * head_stride() + s * head_dim() elements of dtype(); values likewise
  // from values(layer). A head's region (core/kv_rows.hpp) ends with its rows' scales for int8.
  const void* keys(int layer) const { return base() + offset(layer, 0, 0, 0) * dtype_size(dtype_); }
  const void* values(int layer) const { return base() + offset(layer, 0, 1, 0) * dtype_size(dtype_); }
  void* keys(int layer) { return base() + offset(layer, 0, 0, 0) * dtype_size(dtype_); }
  void* values(int layer) { return base() + offset(layer, 0, 1, 0) * dtype_size(dtype_); }
  int64_t block_stride() const { return 2ll * num_kv_heads_ * head_stride(); }
  int64_t head_stride() const { return kv_head_stride(dtype_, block_size_, head_dim_); }

  int num_layers() const { return num_layers_; }
  int num_kv_heads() const { return num_kv_heads_; }
  // Bytes of one block over every layer: what a swap, a copy or an export moves per block.
  size_t block_bytes() const { return static_cast<size_t>(num_layers_) * layer_block_bytes(); }
  // Whether `other` stores blocks with the same shape and dtype (blocks can move between the two byte for byte).
  bool same_layout(const KvCache& other) const;
  // Copies block `src` of this cache, every layer, to block `dst` of `to` (this cache itself, or another one with
  // the same layout, e.g. a host swap space). Byte-exact.
  void copy_block(uint32_t src, KvCache& to, uint32_t dst) const;
  // Block `block`'s bytes, every layer, to `out` [block_bytes()] in the order layer, k|v, kv head, then the head's
  // region (slot, dim; int8: then the slots' scales); and back. The export / import format of a block.
  void read_block(uint32_t block, unsigned char* out) const;
  void write_block(uint32_t block, const unsigned char* in);

 private:
  size_t offset(int layer, uint32_t block, int kv, int head) const {
    return (((static_cast<size_t>(layer) * num_blocks_ + block) * 2 + kv) * num_kv_heads_ + head) *
           static_cast<size_t>(head_stride());
  }
  size_t layer_block_bytes() const { return static_cast<size_t>(block_stride()) * dtype_size(dtype_); }
  unsigned char* base() const { return storage_.data ? storage_.data : const_cast<unsigned char*>(data_.data()); }
  // How bytes move between this cache and `other` (or the host): the device's copy when either is on a device.
  void copy_bytes(const KvCache& other, void* dst, const void* src, size_t n) const;
  int num_layers_, num_kv_heads_, head_dim_, row_, num_blocks_, block_size_;
  DType dtype_;
  // [layers, blocks, 2 (k|v), kv_heads, head region] with a region of [block_size, head_dim] elements of dtype_
  // (int8: then block_size f32 scales): one head's keys in a block are contiguous. Huge pages: attention reads blocks scattered over the whole cache. Empty with a device's storage.
  LargeBuffer data_;
  KvStorage storage_;
};

}  // namespace actord
