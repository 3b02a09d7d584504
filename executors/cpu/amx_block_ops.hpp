// The per-block work around the AMX tiles (gemm_amx.inl), apart from the tile instructions: making a bf16 block's B
// operands, turning 4-bit codes into the 8-bit layout's chunks, and adding a group's int32 sums into the f32 totals.
// Each comes twice: scalar here (the emulated tiles' path, any CPU) and with AVX-512 in gemm_amx.cpp (the hardware
// path's: it runs only where AMX is ready, so AVX-512 is there); tests/amx_kernels_test.cpp checks that the two
// give the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu::amx_detail {

// B operands of one bf16 weight block (blocked_weights.hpp: per input feature t, 16 dwords, dword l = (column l in
// its high half, column 16 + l in its low half)), pairs [p_begin, p_end) of them: [pair][16 dwords] for columns
// 0..15 in `lo`, for 16..31 in `hi` (pair p at lo + 16 p): dword (p, l) = (P[2p][l] >> 16) | (P[2p + 1][l] &
// 0xFFFF0000) and (P[2p][l] & 0xFFFF) | (P[2p + 1][l] << 16); zero pairs past the k features.
inline void make_b_operands(const unsigned char* block, int64_t k, int64_t p_begin, int64_t p_end, uint32_t* lo,
                            uint32_t* hi) {
  const auto* words = reinterpret_cast<const uint32_t*>(block);  // [k][16]
  const int64_t pairs = std::min(p_end, (k + 1) / 2);
  for (int64_t p = p_begin; p < pairs; ++p) {
    const uint32_t* p0 = words + 2 * p * 16;
    const bool odd = 2 * p + 1 < k;
    for (int l = 0; l < 16; ++l) {
      const uint32_t w0 = p0[l], w1 = odd ? p0[16 + l] : 0u;
      lo[p * 16 + l] = (w0 >> 16) | (w1 & 0xFFFF0000u);
      hi[p * 16 + l] = (w0 & 0xFFFFu) | (w1 << 16);
    }
  }
  const int64_t zeros_from = std::max(p_begin, pairs);
  if (zeros_from < p_end) {
    std::fill(lo + zeros_from * 16, lo + p_end * 16, 0u);
    std::fill(hi + zeros_from * 16, hi + p_end * 16, 0u);
  }
}

// `chunks` 128-byte chunks of 4-bit codes (quantized_weights.hpp: byte b of column c's word = feature 8j + b in the
// low nibble, 8j + 4 + b in the high one) as 8-bit chunks: chunk j becomes out chunks 2j (the low nibbles: features
// 8j .. 8j + 3) and 2j + 1 (the high nibbles), the layout of 8-bit codes.
inline void unpack_nibble_chunks(const unsigned char* codes, int64_t chunks, unsigned char* out) {
  for (int64_t j = 0; j < chunks; ++j) {
    for (int b = 0; b < 128; ++b) {
      out[256 * j + b] = codes[128 * j + b] & 0x0F;
      out[256 * j + 128 + b] = codes[128 * j + b] >> 4;
    }
  }
}

// One group's int32 sums S of `rows` rows x 32 columns into the f32 totals, with the group's 32 f16 scales and,
// when affine, its 32 f16 offsets: total = fma(scale, f32(S - zero * q), total), then (affine, zero = 0) total =
// fma(offset, f32(q), total), q the row's sum of its int8 codes over the group (code_sums[r * code_sums_stride]).
// The VNNI kernel's arithmetic, operation for operation.
inline void add_group_sums(const int32_t (*sums)[kBlockCols], int rows, const uint16_t* scales,
                           const uint16_t* offsets, const int32_t* code_sums, int64_t code_sums_stride, int zero,
                           float (*total)[kBlockCols]) {
  float scale[kBlockCols], offset[kBlockCols];
  for (int c = 0; c < kBlockCols; ++c) {
    scale[c] = f16_to_f32(scales[c]);
    offset[c] = offsets ? f16_to_f32(offsets[c]) : 0.0f;
  }
  for (int r = 0; r < rows; ++r) {
    const int32_t q = code_sums[r * code_sums_stride];
    for (int c = 0; c < kBlockCols; ++c) {
      float t = std::fma(scale[c], static_cast<float>(sums[r][c] - zero * q), total[r][c]);
      if (offsets) t = std::fma(offset[c], static_cast<float>(q), t);
      total[r][c] = t;
    }
  }
}

// A block's f32 sums (`rows` rows x 32 columns) to its outputs, y's rows ldy apart: with glu (a pack_glu block),
// y[r][c] = silu(sums[r][c]) * sums[r][16 + c] for c < outs (<= 16); else y[r][c] = sums[r][c] + bias[c] (no bias:
// + 0) for c < outs (<= 32). Always inlined, so that write_sums_avx512 is this body compiled for AVX-512.
[[gnu::always_inline]] inline void write_sums(const float (*sums)[kBlockCols], int rows, int outs, bool glu, const float* bias, float* y,
                       int64_t ldy) {
  for (int r = 0; r < rows; ++r) {
    float* yr = y + r * ldy;
    const float* s = sums[r];
    if (glu) {
      for (int c = 0; c < outs; ++c) yr[c] = silu(s[c]) * s[16 + c];
    } else {
      for (int c = 0; c < outs; ++c) yr[c] = s[c] + (bias ? bias[c] : 0.0f);
    }
  }
}

// The same with AVX-512 (gemm_amx.cpp): call only where the CPU has AVX-512 F/BW/VL and F16C.
void make_b_operands_avx512(const unsigned char* block, int64_t k, int64_t p_begin, int64_t p_end, uint32_t* lo,
                            uint32_t* hi);
void unpack_nibble_chunks_avx512(const unsigned char* codes, int64_t chunks, unsigned char* out);
void add_group_sums_avx512(const int32_t (*sums)[kBlockCols], int rows, const uint16_t* scales,
                           const uint16_t* offsets, const int32_t* code_sums, int64_t code_sums_stride, int zero,
                           float (*total)[kBlockCols]);
void write_sums_avx512(const float (*sums)[kBlockCols], int rows, int outs, bool glu, const float* bias, float* y,
                       int64_t ldy);

}  // namespace actord::cpu::amx_detail
