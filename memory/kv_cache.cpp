#include "memory/kv_cache.hpp"

namespace actord {

KvCache::KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, int block_size)
    : num_layers_(num_layers),
      row_(num_kv_heads * head_dim),
      num_blocks_(num_blocks),
      block_size_(block_size),
      data_(static_cast<size_t>(num_layers) * num_blocks * 2 * block_size * num_kv_heads * head_dim, 0.0f) {}

}  // namespace actord
