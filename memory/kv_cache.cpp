#include "memory/kv_cache.hpp"

#include <algorithm>

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

}  // namespace actord
