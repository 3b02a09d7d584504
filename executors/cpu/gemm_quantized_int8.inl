// The GEMM over quantized weights (quantized_weights.hpp) with int8 activations and int8 dot products, written once
// over a vector type (its shared parts: int8_vectors.inl) and included by gemm_avx512_vnni.cpp (AVX512-VNNI, 16
// columns per vector), gemm_avx_vnni.cpp (AVX-VNNI, 8 per vector: the block's 32 columns in two halves), and, for
// CPUs without VNNI, gemm_avx512.cpp and gemm_avx2.cpp (vpmaddubsw + vpmaddwd). x is quantized per row
// (quantized_x_int8: codes q, one scale s_x per row, integer sums of q per group), and per chunk of the block one dot
// product per vector of columns and row adds four features' (unsigned weight code) x (signed x code) products to
// int32 sums (4-bit codes: the low and the high nibbles). At a group's end the sums are exact integers S; the total
// takes scale * S + offset * sum(q), symmetric codes as scale * (S - zero * sum(q)) in integers; the output is s_x *
// total.
//
// `Vec` provides: kWidth (16 or 8); I, F (int32 and f32 vectors); load(const unsigned char*) (kWidth words),
// store(unsigned char*, I), add_bytes(I, char);
// dot8(acc, codes, x): acc + per word the four (8-bit code - kDot8Offset) x (x code) products (vpdpbusd: offset 0;
// without VNNI: 128, codes centred so that vpmaddubsw's 16-bit pair sums cannot saturate); dot4x2(acc, lo, x_lo, hi,
// x_hi): acc + both planes' products (4-bit or 6-bit codes, exact on either: two 6-bit pairs sum to at most 4 x 63 x
// 127 = 32,004 in int16); set1(int32_t); low_nibbles(I), high_nibbles(I); with_crumbs<shift>(nibbles, h) (nibbles
// with bits 4-5 of each byte from h shifted left by `shift`, right for a negative one); add_i(I, I); cvt(I) -> F;
// load_f16(const unsigned char*) (kWidth f16 as f32); fma, mul, add(F...); set1f(float); loadf(const float*);
// storef(float*, F); zero_i(), zero_f().
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/quantized_product.inl"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu::quantized_int8 {

constexpr int64_t kChunk = 128;

// MR rows of int8 x against one block (half `half` of its 32 columns when vectors are 8 wide): out[i, c] (+ bias),
// or with kGlu silu(gate c) * up c.
template <class Vec, int kBits, int MR, bool kAffine, bool kGlu, bool kOneGroup>
void micro_kernel(const QuantizedX& x, int row0, const WeightMatrix& w, const unsigned char* block, int half,
                  const float* bias, float* out, int64_t ldo) {
  using I = typename Vec::I;
  using F = typename Vec::F;
  constexpr int W = Vec::kWidth;
  // A unit of codes (quantized_weights.hpp): one chunk of 4 (8 bits) or 8 (4 bits) features, three of 16 (6 bits).
  constexpr int kFeatures = kBits == 8 ? 4 : kBits == 4 ? 8 : 16;
  constexpr int64_t kUnit = kBits == 6 ? 3 * kChunk : kChunk;
  const int64_t units = x.group_stride / kFeatures;
  const int64_t group_bytes = quant_group_bytes(w);
  const auto* xr = reinterpret_cast<const int32_t*>(x.codes + row0 * x.ld);  // 4 codes per word
  const int64_t ldw = x.ld / 4;
  const int32_t* sums = x.code_sums + row0 * x.groups;
  const int64_t at0 = half * W * 4, at1 = 64 + half * W * 4;  // this half's words in a chunk
  F total[kOneGroup ? 1 : MR][2];
  if constexpr (!kOneGroup) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) total[i][0] = total[i][1] = Vec::zero_f();
  }
  F result[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) result[i][0] = result[i][1] = Vec::zero_f();
  for (int64_t g = 0; g < x.groups; ++g) {
    const unsigned char* p = block + g * group_bytes;
    I acc[MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = Vec::zero_i();
    const int32_t* xg = xr + g * x.group_stride / 4;
    for (int64_t ch = 0; ch < units; ++ch, p += kUnit) {
      _mm_prefetch(reinterpret_cast<const char*>(p + 8 * kChunk), _MM_HINT_T0);
      if constexpr (kBits == 6) _mm_prefetch(reinterpret_cast<const char*>(p + 8 * kChunk + 2 * kChunk), _MM_HINT_T0);
      const I w0 = Vec::load(p + at0), w1 = Vec::load(p + at1);
      if constexpr (kBits == 6) {
        // Features 16 ch + (0..3, 4..7, 8..11, 12..15) of each word, 0..63 each.
        I q0[4], q1[4];
        quantized_product::six_bit_codes<Vec>(w0, Vec::load(p + kChunk + at0), Vec::load(p + 2 * kChunk + at0), q0);
        quantized_product::six_bit_codes<Vec>(w1, Vec::load(p + kChunk + at1), Vec::load(p + 2 * kChunk + at1), q1);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const int32_t* xw = xg + i * ldw + 4 * ch;
          const I a0 = Vec::set1(xw[0]), a1 = Vec::set1(xw[1]), a2 = Vec::set1(xw[2]), a3 = Vec::set1(xw[3]);
          acc[i][0] = Vec::dot4x2(Vec::dot4x2(acc[i][0], q0[0], a0, q0[1], a1), q0[2], a2, q0[3], a3);
          acc[i][1] = Vec::dot4x2(Vec::dot4x2(acc[i][1], q1[0], a0, q1[1], a1), q1[2], a2, q1[3], a3);
        }
      } else if constexpr (kBits == 8) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const I a = Vec::set1(xg[i * ldw + ch]);
          acc[i][0] = Vec::dot8(acc[i][0], w0, a);
          acc[i][1] = Vec::dot8(acc[i][1], w1, a);
        }
      } else {
        const I lo0 = Vec::low_nibbles(w0), lo1 = Vec::low_nibbles(w1);
        const I hi0 = Vec::high_nibbles(w0), hi1 = Vec::high_nibbles(w1);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const I a_lo = Vec::set1(xg[i * ldw + 2 * ch]);
          const I a_hi = Vec::set1(xg[i * ldw + 2 * ch + 1]);
          acc[i][0] = Vec::dot4x2(acc[i][0], lo0, a_lo, hi0, a_hi);
          acc[i][1] = Vec::dot4x2(acc[i][1], lo1, a_lo, hi1, a_hi);
        }
      }
    }
    const F s0 = Vec::load_f16(p + half * W * 2), s1 = Vec::load_f16(p + 32 + half * W * 2);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      // The group's sum S (as f32: exact below 2^24 in magnitude, as sums of one group are) into the total with
      // one FMA per vector: total + scale * S (+ offset * sum(q)), symmetric S less zero * sum(q) in integers.
      // The sums hold S less kDot8Offset * sum(q) for 8-bit codes.
      const int32_t code_sum = sums[i * x.groups + g];
      constexpr int kTaken = kBits == 8 ? Vec::kDot8Offset : 0;
      constexpr int kAdd = kAffine ? kTaken : kTaken - symmetric_zero(kBits);
      F c0, c1;
      if constexpr (kAdd == 0) {
        c0 = Vec::cvt(acc[i][0]);
        c1 = Vec::cvt(acc[i][1]);
      } else {
        const I add = Vec::set1(code_sum * kAdd);
        c0 = Vec::cvt(Vec::add_i(acc[i][0], add));
        c1 = Vec::cvt(Vec::add_i(acc[i][1], add));
      }
      F& t0 = kOneGroup ? result[i][0] : total[kOneGroup ? 0 : i][0];
      F& t1 = kOneGroup ? result[i][1] : total[kOneGroup ? 0 : i][1];
      t0 = Vec::fma(s0, c0, t0);
      t1 = Vec::fma(s1, c1, t1);
      if constexpr (kAffine) {
        const F xs = Vec::set1f(static_cast<float>(code_sum));
        t0 = Vec::fma(Vec::load_f16(p + 64 + half * W * 2), xs, t0);
        t1 = Vec::fma(Vec::load_f16(p + 96 + half * W * 2), xs, t1);
      }
    }
  }
  const int c0 = half * W, c1 = 16 + half * W;
  for (int i = 0; i < MR; ++i) {
    const F sx = Vec::set1f(x.row_scales[row0 + i]);
    const F r0 = Vec::mul(sx, kOneGroup ? result[i][0] : total[kOneGroup ? 0 : i][0]);
    const F r1 = Vec::mul(sx, kOneGroup ? result[i][1] : total[kOneGroup ? 0 : i][1]);
    if constexpr (kGlu) {
      alignas(64) float gate[W], up[W];
      Vec::storef(gate, r0);
      Vec::storef(up, r1);
      float* o = out + i * ldo + c0;
#pragma omp simd
      for (int l = 0; l < W; ++l) o[l] = silu(gate[l]) * up[l];
    } else {
      Vec::storef(out + i * ldo + c0, bias ? Vec::add(r0, Vec::loadf(bias + c0)) : r0);
      Vec::storef(out + i * ldo + c1, bias ? Vec::add(r1, Vec::loadf(bias + c1)) : r1);
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

}  // namespace actord::cpu::quantized_int8
