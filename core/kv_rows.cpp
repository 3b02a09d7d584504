#include "core/kv_rows.hpp"

#include <algorithm>
#include <cmath>

namespace actord {

void store_kv_row(DType dtype, const float* x, int head_dim, int block_size, void* head, int slot) {
  auto* region = static_cast<unsigned char*>(head);
  if (dtype != DType::i8) {
    convert_from_f32(dtype, x, region + int64_t(slot) * head_dim * int64_t(dtype_size(dtype)), size_t(head_dim));
    return;
  }
  float amax = 0.0f;
  for (int d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(x[d]));
  const float scale = amax / 127.0f;
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  auto* codes = reinterpret_cast<int8_t*>(region + int64_t(slot) * head_dim);
  // As f32_to_i8, in a form the compiler vectorises: |x| * inverse <= 127 (up to its rounding), a NaN becomes -127,
  // then round to nearest even by adding and subtracting 1.5 * 2^23.
  constexpr float kRound = 12582912.0f;
  for (int d = 0; d < head_dim; ++d) {
    float v = x[d] * inverse;
    v = v >= -127.0f ? v : -127.0f;
    v = v <= 127.0f ? v : 127.0f;
    codes[d] = static_cast<int8_t>(static_cast<int>((v + kRound) - kRound));
  }
  std::memcpy(region + int64_t(block_size) * head_dim + 4 * int64_t(slot), &scale, 4);
}

void load_kv_row(DType dtype, const void* head, int head_dim, int block_size, int slot, float* out) {
  const auto* region = static_cast<const unsigned char*>(head);
  convert_to_f32(dtype, region + int64_t(slot) * head_dim * int64_t(dtype_size(dtype)), out, size_t(head_dim));
  if (dtype != DType::i8) return;
  const float scale = kv_row_scale(head, block_size, head_dim, slot);
  for (int d = 0; d < head_dim; ++d) out[d] *= scale;
}

}  // namespace actord
