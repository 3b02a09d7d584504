#include "memory/kv_relayout.hpp"

#include <algorithm>
#include <cstring>

namespace actord {

void copy_kv_overlap(const unsigned char* src, const KvShard& from, unsigned char* dst, const KvShard& to,
                     size_t num_blocks) {
  const int layer_lo = std::max(from.first_layer, to.first_layer);
  const int layer_hi = std::min(from.first_layer + from.num_layers, to.first_layer + to.num_layers);
  const int head_lo = std::max(from.first_head, to.first_head);
  const int head_hi = std::min(from.first_head + from.num_heads, to.first_head + to.num_heads);
  if (layer_lo >= layer_hi || head_lo >= head_hi) return;
  const size_t head_bytes = from.head_bytes();
  const size_t run = size_t(head_hi - head_lo) * head_bytes;  // the shared heads are contiguous in both
  const size_t from_block = from.block_bytes(), to_block = to.block_bytes();
  for (size_t b = 0; b < num_blocks; ++b) {
    for (int layer = layer_lo; layer < layer_hi; ++layer) {
      for (int kv = 0; kv < 2; ++kv) {
        const size_t at_from = ((size_t(layer - from.first_layer) * 2 + size_t(kv)) * size_t(from.num_heads) +
                                size_t(head_lo - from.first_head)) * head_bytes;
        const size_t at_to = ((size_t(layer - to.first_layer) * 2 + size_t(kv)) * size_t(to.num_heads) +
                              size_t(head_lo - to.first_head)) * head_bytes;
        std::memcpy(dst + b * to_block + at_to, src + b * from_block + at_from, run);
      }
    }
  }
}

}  // namespace actord
