// The GEMM over quantized weights (quantized_weights.hpp) with f32 activations, written once over a vector type and
// included by gemm_avx2.cpp and gemm_avx512.cpp: per chunk of 4 (8 bits) or 8 (4 bits) input features, the block's
// code words are loaded once and each feature's codes are shifted, masked and converted to f32 in registers; MR rows
// of x take FMAs with them into per-group sums S, and at each group's end the running total takes
// scale * S + offset * (the row's sum of x over the group) — the codes' affine map applied once per group.
//
// `Vec` provides what gemm_blocked.inl asks for, and: using W (integer vector); load_words(const unsigned char*)
// (kWidth 32-bit words); template <int kShift, unsigned kMask> codes(W) -> V (((w >> kShift) & kMask) as f32);
// load_f16(const unsigned char*) (kWidth f16 as f32); mul(V, V); set1(float).
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/quantized_product.inl"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu::quantized {

constexpr int64_t kChunk = 128;  // bytes of one chunk of codes (32 words)

// Feature f of a chunk's words as f32 (8 bits: byte f; 4 bits: nibble f % 4 of the low or high half).
template <class Vec, int kBits, int kF>
typename Vec::V feature(typename Vec::W words) {
  if constexpr (kBits == 8) {
    return Vec::template codes<8 * kF, 0xFF>(words);
  } else {
    return Vec::template codes<8 * (kF % 4) + 4 * (kF / 4), 0x0F>(words);
  }
}

template <class Vec, int kBits, int MR, int kF>
inline void chunk_features(typename Vec::W w0, typename Vec::W w1, const float* x, int64_t ldx,
                           typename Vec::V (&acc)[MR][2]) {
  if constexpr (kF < (kBits == 8 ? 4 : 8)) {
    const auto v0 = feature<Vec, kBits, kF>(w0);
    const auto v1 = feature<Vec, kBits, kF>(w1);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const auto a = Vec::broadcast(x + i * ldx + kF);
      acc[i][0] = Vec::fma(a, v0, acc[i][0]);
      acc[i][1] = Vec::fma(a, v1, acc[i][1]);
    }
    chunk_features<Vec, kBits, MR, kF + 1>(w0, w1, x, ldx, acc);
  }
}

// MR rows of prepared x against one block (half `half` of its 32 columns when vectors are 8 wide): the plain
// outputs out[i, c] (+ bias), or with kGlu the 16 gated ones silu(gate c) * up c. kOneGroup: the whole row is one
// group (per-channel scales), so the sums need no second set of registers.
template <class Vec, int kBits, int MR, bool kAffine, bool kGlu, bool kOneGroup>
void micro_kernel(const QuantizedX& x, int row0, const WeightMatrix& w, const unsigned char* block, int half,
                  const float* bias, float* out, int64_t ldo) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  constexpr int kFeatures = kBits == 8 ? 4 : 8;
  const int64_t chunks = x.group_stride / kFeatures;
  const int64_t group_bytes = quant_group_bytes(w);
  const float* xr = x.x + row0 * x.ld;
  const float* sums = x.sums + row0 * x.groups;
  V total[kOneGroup ? 1 : MR][2];
  if constexpr (!kOneGroup) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) total[i][0] = total[i][1] = Vec::zero();
  }
  const int64_t at0 = half * W * 4, at1 = 64 + half * W * 4;  // this half's words in a chunk
  V acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = Vec::zero();
  for (int64_t g = 0; g < x.groups; ++g) {
    const unsigned char* p = block + g * group_bytes;
    if (g > 0) {
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = Vec::zero();
    }
    const float* xg = xr + g * x.group_stride;
    for (int64_t ch = 0; ch < chunks; ++ch, p += kChunk) {
      _mm_prefetch(reinterpret_cast<const char*>(p + 8 * kChunk), _MM_HINT_T0);
      const auto w0 = Vec::load_words(p + at0);
      const auto w1 = Vec::load_words(p + at1);
      chunk_features<Vec, kBits, MR, 0>(w0, w1, xg + ch * kFeatures, x.ld, acc);
    }
    const V s0 = Vec::load_f16(p + half * W * 2), s1 = Vec::load_f16(p + 32 + half * W * 2);
    V o0, o1;
    if constexpr (kAffine) {
      o0 = Vec::load_f16(p + 64 + half * W * 2);
      o1 = Vec::load_f16(p + 96 + half * W * 2);
    } else {
      const V minus_zero = Vec::set1(kBits == 8 ? -128.0f : -8.0f);
      o0 = Vec::mul(s0, minus_zero);
      o1 = Vec::mul(s1, minus_zero);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V xs = Vec::broadcast(sums + i * x.groups + g);
      if constexpr (kOneGroup) {
        acc[i][0] = Vec::fma(o0, xs, Vec::mul(s0, acc[i][0]));
        acc[i][1] = Vec::fma(o1, xs, Vec::mul(s1, acc[i][1]));
      } else {
        total[i][0] = Vec::fma(o0, xs, Vec::fma(s0, acc[i][0], total[i][0]));
        total[i][1] = Vec::fma(o1, xs, Vec::fma(s1, acc[i][1], total[i][1]));
      }
    }
  }
  const int c0 = half * W, c1 = 16 + half * W;
  for (int i = 0; i < MR; ++i) {
    const V r0 = kOneGroup ? acc[i][0] : total[kOneGroup ? 0 : i][0];
    const V r1 = kOneGroup ? acc[i][1] : total[kOneGroup ? 0 : i][1];
    if constexpr (kGlu) {
      alignas(64) float gate[W], up[W];
      Vec::store(gate, r0);
      Vec::store(up, r1);
      float* o = out + i * ldo + c0;
#pragma omp simd
      for (int l = 0; l < W; ++l) o[l] = silu(gate[l]) * up[l];
    } else {
      Vec::store(out + i * ldo + c0, bias ? Vec::add(r0, Vec::load_x(bias + c0)) : r0);
      Vec::store(out + i * ldo + c1, bias ? Vec::add(r1, Vec::load_x(bias + c1)) : r1);
    }
  }
}

// The micro-kernel as quantized_product.inl's product calls it.
struct Rows {
  template <class Vec, int kBits, int MR, bool kAffine, bool kGlu, bool kOneGroup>
  static void run(const QuantizedX& x, int row0, const WeightMatrix& w, const unsigned char* block, int half,
                  const float* bias, float* out, int64_t ldo) {
    micro_kernel<Vec, kBits, MR, kAffine, kGlu, kOneGroup>(x, row0, w, block, half, bias, out, ldo);
  }
};

}  // namespace actord::cpu::quantized
