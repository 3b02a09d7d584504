// The loop of the quantized GEMMs over a block range (quantized_weights.hpp), for the int8-activation kernels
// (gemm_quantized_int8.inl) of every instruction set: every weight block meets the rows of
// prepared x in balanced register blocks, half blocks when vectors are 8 wide, the last partial block through a
// 32-column scratch; plain outputs (+ bias) or the gated ones of a fused gate/up matrix.
//
// `Rows` provides template <class Vec, int kBits, int MR, bool kAffine, bool kGlu, bool kOneGroup> static void
// run(x, row0, w, block, half, bias, out, ldo): MR rows against one block (its micro-kernel).
#pragma once

#include <algorithm>
#include <type_traits>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu::quantized_product {

template <class Rows, class Vec, int kBits, int MR, bool kAffine, bool kGlu, bool kOneGroup>
void run_rows(int rows, const QuantizedX& x, int row0, const WeightMatrix& w, const unsigned char* block, int half,
              const float* bias, float* out, int64_t ldo) {
  if constexpr (MR > 1) {
    if (rows < MR) return run_rows<Rows, Vec, kBits, MR - 1, kAffine, kGlu, kOneGroup>(rows, x, row0, w, block, half, bias, out, ldo);
  }
  Rows::template run<Vec, kBits, MR, kAffine, kGlu, kOneGroup>(x, row0, w, block, half, bias, out, ldo);
}

// Every weight block of [n_begin, n_end) meets the rows of x in balanced register blocks of at most kMaxRows (kMaxOne
// when the row is one group); the last, partial block goes through a 32-column scratch.
template <class Rows, class Vec, int kBits, bool kAffine, int kMaxRows, int kMaxOne>
void product(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
             int64_t n_begin, int64_t n_end) {
  constexpr int kHalves = 16 / Vec::kWidth;
  const bool glu = ff_glu > 0, one_group = x.groups == 1;
  const int max_rows = one_group ? kMaxOne : kMaxRows;
  const int outs_per_block = glu ? kBlockCols / 2 : kBlockCols;
  const int64_t outputs = glu ? ff_glu : w.rows, ldy = outputs;
  const int64_t block_bytes = quant_block_bytes(w);
  const int n_row_blocks = (x.m + max_rows - 1) / max_rows;
  alignas(64) float tail[kMaxOne * kBlockCols];
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const auto* block = static_cast<const unsigned char*>(w.data) + j0 / kBlockCols * block_bytes;
    const int64_t out0 = j0 / kBlockCols * outs_per_block;
    const int outs = static_cast<int>(std::min<int64_t>(outs_per_block, outputs - out0));
    int i = 0;
    for (int b = 0; b < n_row_blocks; ++b) {
      const int mr = x.m / n_row_blocks + (b < x.m % n_row_blocks ? 1 : 0);
      for (int h = 0; h < kHalves; ++h) {
        const float* bias_here = bias ? bias + j0 : nullptr;
        float* yb = y + i * ldy + out0;
        const bool whole = outs == outs_per_block;
        auto run = [&](auto glu_tag, auto one_tag) {
          constexpr bool kG = decltype(glu_tag)::value, kO = decltype(one_tag)::value;
          constexpr int kR = kO ? kMaxOne : kMaxRows;
          if (whole) {
            run_rows<Rows, Vec, kBits, kR, kAffine, kG, kO>(mr, x, i, w, block, h, bias_here, yb, ldy);
          } else {
            run_rows<Rows, Vec, kBits, kR, kAffine, false, kO>(mr, x, i, w, block, h, nullptr, tail, kBlockCols);
          }
        };
        if (glu) {
          one_group ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
        } else {
          one_group ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
        }
      }
      if (outs < outs_per_block) {
        for (int r = 0; r < mr; ++r) {
          float* yr = y + (i + r) * ldy + out0;
          const float* tr = tail + r * kBlockCols;
          for (int c = 0; c < outs; ++c) yr[c] = glu ? silu(tr[c]) * tr[16 + c] : tr[c] + (bias ? bias[j0 + c] : 0.0f);
        }
      }
      i += mr;
    }
  }
}

template <class Rows, class Vec, int kMaxRows, int kMaxOne>
void product_any(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
                 int64_t n_begin, int64_t n_end) {
  if (w.quant.bits == 8) {
    if (w.quant.affine) return product<Rows, Vec, 8, true, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
    return product<Rows, Vec, 8, false, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
  }
  if (w.quant.affine) return product<Rows, Vec, 4, true, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
  product<Rows, Vec, 4, false, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
}

}  // namespace actord::cpu::quantized_product
