#include "core/kv_rows.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace actord {

void store_kv_row(DType dtype, const float* x, int head_dim, int block_size, void* head, int slot) {
  auto* region = static_cast<unsigned char*>(head);
  if (dtype != DType::i8) {
    convert_from_f32(dtype, x, region + int64_t(slot) * head_dim * int64_t(dtype_size(dtype)), size_t(head_dim));
    return;
  }
  // max |x| over the row from the bits: for non-negative floats the integer order is the float order, and an
  // integer maximum vectorises (a float one, NaN-aware, does not).
  int32_t amax_bits = 0;
  for (int d = 0; d < head_dim; ++d)
    amax_bits = std::max(amax_bits, static_cast<int32_t>(std::bit_cast<uint32_t>(x[d]) & 0x7fffffffu));
  const float amax = std::bit_cast<float>(amax_bits);
  auto* codes = reinterpret_cast<int8_t*>(region + int64_t(slot) * head_dim);
  float scale = amax / 127.0f;
  if (!(amax <= std::numeric_limits<float>::max())) {  // a NaN or an infinity: the row reads back as NaN
    std::memset(codes, 0, size_t(head_dim));
    scale = std::numeric_limits<float>::quiet_NaN();
  } else {
    // Round to nearest even by adding and subtracting 1.5 * 2^23: |x| * inverse <= 127 up to its rounding, so every
    // code is in [-127, 127]; the loop vectorises.
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    constexpr float kRound = 12582912.0f;
    for (int d = 0; d < head_dim; ++d)
      codes[d] = static_cast<int8_t>(static_cast<int32_t>((x[d] * inverse + kRound) - kRound));
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
