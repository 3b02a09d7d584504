// KV blocks between shapes of a replica: a sequence's blocks exported from the ranks of one shape (each rank holds
// its pipeline stage's layers and its tensor-parallel share of the KV heads) become the blocks the ranks of another
// shape import, so a sequence moves to a replica of another TP / PP shape with its KV instead of being recomputed.
//
// Contract: pure byte copies, no allocation. Blocks are laid out as KvCache::read_block writes them: per block, per
// layer of the shard, k then v, per KV head of the shard, block_size slots of head_dim elements (int8: then the
// slots' scales, core/kv_rows.hpp). A shard with every layer and head is the whole model's (the form a moving
// sequence travels in).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/kv_rows.hpp"

namespace actord {

struct KvShard {
  int total_layers = 0, total_heads = 0;  // the model's
  int first_layer = 0, num_layers = 0;    // this shard's layers [first_layer, first_layer + num_layers)
  int first_head = 0, num_heads = 0;      // and KV heads
  int head_dim = 0, block_size = 0;
  size_t elem_bytes = 0;                  // of the KV dtype
  size_t scale_bytes = 0;                 // per slot after a head's rows (int8: its f32 scale)

  static KvShard whole(int layers, int heads, int head_dim, int block_size, size_t elem_bytes, size_t scale_bytes = 0) {
    return {layers, heads, 0, layers, 0, heads, head_dim, block_size, elem_bytes, scale_bytes};
  }
  bool operator==(const KvShard&) const = default;
  // elem_bytes and scale_bytes of a cache of `dtype` (core/kv_rows.hpp).
  void set_dtype(DType dtype) {
    elem_bytes = dtype_size(dtype);
    scale_bytes = size_t(kv_scale_bytes(dtype, 1));
  }
  // One KV head's region of a block: its slots' rows and scales.
  size_t head_bytes() const { return size_t(block_size) * (size_t(head_dim) * elem_bytes + scale_bytes); }
  size_t block_bytes() const { return size_t(num_layers) * 2 * size_t(num_heads) * head_bytes(); }
  // Same model, head size, block size and dtype: blocks of the two can be re-laid out into each other.
  bool compatible(const KvShard& o) const {
    return total_layers == o.total_layers && total_heads == o.total_heads && head_dim == o.head_dim &&
           block_size == o.block_size && elem_bytes == o.elem_bytes && scale_bytes == o.scale_bytes;
  }
  // Every layer and head of `o` is in this shard.
  bool covers(const KvShard& o) const {
    return first_layer <= o.first_layer && o.first_layer + o.num_layers <= first_layer + num_layers &&
           first_head <= o.first_head && o.first_head + o.num_heads <= first_head + num_heads;
  }
};

// Copies the layers and heads `from` and `to` share, for `num_blocks` blocks, from `src` (laid out as `from`) to
// `dst` (laid out as `to`); what `to` holds beyond `from` is left as it was. The two must be compatible().
void copy_kv_overlap(const unsigned char* src, const KvShard& from, unsigned char* dst, const KvShard& to,
                     size_t num_blocks);

}  // namespace actord
