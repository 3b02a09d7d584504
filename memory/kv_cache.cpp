#include "memory/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "core/status.hpp"

namespace actord {

size_t KvCache::bytes_for(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size,
                          DType dtype) {
  return static_cast<size_t>(num_layers) * num_blocks * 2 * num_kv_heads *
         static_cast<size_t>(kv_head_stride(dtype, block_size, head_dim)) * dtype_size(dtype);
}

KvCache::KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size, DType dtype,
                 KvStorage storage)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      row_(num_kv_heads * head_dim),
      num_blocks_(num_blocks),
      block_size_(block_size),
      dtype_(dtype),
      data_(storage.data ? LargeBuffer()
                         : LargeBuffer(bytes_for(num_layers, num_kv_heads, head_dim, num_blocks, block_size, dtype))),
      storage_(std::move(storage)) {
  ACTORD_CHECK(!storage_.data || storage_.copy);
}

void KvCache::copy_bytes(const KvCache& other, void* dst, const void* src, size_t n) const {
  if (!on_host()) {
    storage_.copy(dst, src, n);
  } else if (!other.on_host()) {
    other.storage_.copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

bool KvCache::same_layout(const KvCache& other) const {
  return num_layers_ == other.num_layers_ && num_kv_heads_ == other.num_kv_heads_ && head_dim_ == other.head_dim_ &&
         block_size_ == other.block_size_ && dtype_ == other.dtype_;
}

void KvCache::copy_block(uint32_t src, KvCache& to, uint32_t dst) const {
  ACTORD_CHECK(same_layout(to) && static_cast<int>(src) < num_blocks_ && static_cast<int>(dst) < to.num_blocks_);
  const size_t esize = dtype_size(dtype_);
  for (int layer = 0; layer < num_layers_; ++layer) {
    copy_bytes(to, to.base() + to.offset(layer, dst, 0, 0) * esize, base() + offset(layer, src, 0, 0) * esize,
               layer_block_bytes());
  }
}

void KvCache::read_block(uint32_t block, unsigned char* out) const {
  ACTORD_CHECK(static_cast<int>(block) < num_blocks_);
  const size_t esize = dtype_size(dtype_);
  for (int layer = 0; layer < num_layers_; ++layer)
    copy_bytes(*this, out + layer * layer_block_bytes(), base() + offset(layer, block, 0, 0) * esize,
               layer_block_bytes());
}

void KvCache::write_block(uint32_t block, const unsigned char* in) {
  ACTORD_CHECK(static_cast<int>(block) < num_blocks_);
  const size_t esize = dtype_size(dtype_);
  for (int layer = 0; layer < num_layers_; ++layer)
    copy_bytes(*this, base() + offset(layer, block, 0, 0) * esize, in + layer * layer_block_bytes(),
               layer_block_bytes());
}

}  // namespace actord
