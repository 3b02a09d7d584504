// One KV head's region of a cache block, as KvCache lays it out and the backends write and read it.
//
// Contract: a region holds block_size rows (token slots) of head_dim elements of the cache's dtype, row s at element
// s * head_dim. For DType::i8 the rows hold codes, and after them (at byte block_size * head_dim) one f32 scale per
// row: element d of row s is code[d] * scale[s], with scale = max_d |x[d]| / 127 (symmetric, per token and KV head;
// 0 for a row of zeros), so an element is off by at most scale / 2; a row holding a NaN or an infinity reads back as
// NaN. Scales may be unaligned. Pure functions, no allocation, any thread.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"

namespace actord {

// Bytes after a region's rows: one f32 scale per row for i8, none for the float dtypes.
inline int64_t kv_scale_bytes(DType dtype, int block_size) {
  return dtype == DType::i8 ? 4 * static_cast<int64_t>(block_size) : 0;
}
// Elements of `dtype` from one head's region of a block to the next (for i8, bytes: codes and scales).
inline int64_t kv_head_stride(DType dtype, int block_size, int head_dim) {
  return static_cast<int64_t>(block_size) * head_dim + kv_scale_bytes(dtype, block_size) / int64_t(dtype_size(dtype));
}
// Bytes of one token's K and V rows over `num_layers` x `num_kv_heads` heads, scales included.
inline size_t kv_bytes_per_token(DType dtype, int num_layers, int num_kv_heads, int head_dim) {
  return 2ull * num_layers * num_kv_heads * (size_t(head_dim) * dtype_size(dtype) + size_t(kv_scale_bytes(dtype, 1)));
}

// Row `slot`'s scale in the i8 region at `head`.
inline float kv_row_scale(const void* head, int block_size, int head_dim, int slot) {
  float s;
  std::memcpy(&s, static_cast<const unsigned char*>(head) + int64_t(block_size) * head_dim + 4 * int64_t(slot), 4);
  return s;
}

// Row `slot` of the region at `head` = x[0, head_dim), rounded to dtype (i8: quantized, its scale stored).
void store_kv_row(DType dtype, const float* x, int head_dim, int block_size, void* head, int slot);
// out[0, head_dim) = the values row `slot` of the region at `head` holds (i8: code x scale, rounded to f32).
void load_kv_row(DType dtype, const void* head, int head_dim, int block_size, int slot, float* out);

}  // namespace actord
