#include "memory/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "core/status.hpp"

namespace actord {

KvCache::KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size, DType dtype)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      row_(num_kv_heads * head_dim),
      num_blocks_(num_blocks),
      block_size_(block_size),
      dtype_(dtype),
      data_(static_cast<size_t>(num_layers) * num_blocks * 2 * block_size * num_kv_heads * head_dim * dtype_size(dtype)) {}

void KvCache::write(int layer, uint32_t block, int slot, const float* k_row, const float* v_row) {
  const size_t esize = dtype_size(dtype_);
  for (int g = 0; g < num_kv_heads_; ++g) {
    const size_t at = static_cast<size_t>(slot) * head_dim_;
    convert_from_f32(dtype_, k_row + static_cast<size_t>(g) * head_dim_,
                     data_.data() + (offset(layer, block, 0, g) + at) * esize, static_cast<size_t>(head_dim_));
    convert_from_f32(dtype_, v_row + static_cast<size_t>(g) * head_dim_,
                     data_.data() + (offset(layer, block, 1, g) + at) * esize, static_cast<size_t>(head_dim_));
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
    std::memcpy(to.data_.data() + to.offset(layer, dst, 0, 0) * esize, data_.data() + offset(layer, src, 0, 0) * esize,
                layer_block_bytes());
  }
}

void KvCache::read_block(uint32_t block, unsigned char* out) const {
  ACTORD_CHECK(static_cast<int>(block) < num_blocks_);
  const size_t esize = dtype_size(dtype_);
  for (int layer = 0; layer < num_layers_; ++layer)
    std::memcpy(out + layer * layer_block_bytes(), data_.data() + offset(layer, block, 0, 0) * esize, layer_block_bytes());
}

void KvCache::write_block(uint32_t block, const unsigned char* in) {
  ACTORD_CHECK(static_cast<int>(block) < num_blocks_);
  const size_t esize = dtype_size(dtype_);
  for (int layer = 0; layer < num_layers_; ++layer)
    std::memcpy(data_.data() + offset(layer, block, 0, 0) * esize, in + layer * layer_block_bytes(), layer_block_bytes());
}

}  // namespace actord
