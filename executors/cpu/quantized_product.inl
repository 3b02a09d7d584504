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
#include <vector>

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
// when the row is one group); the last, partial block goes through a 32-column scratch. block_at(j0) gives the
// block of columns [j0, +32) in w's layout.
template <class Rows, class Vec, int kBits, bool kAffine, int kMaxRows, int kMaxOne, class BlockAt>
void product_blocks(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
                    int64_t n_begin, int64_t n_end, BlockAt block_at) {
  constexpr int kHalves = 16 / Vec::kWidth;
  const bool glu = ff_glu > 0, one_group = x.groups == 1;
  const int max_rows = one_group ? kMaxOne : kMaxRows;
  const int outs_per_block = glu ? kBlockCols / 2 : kBlockCols;
  const int64_t outputs = glu ? ff_glu : w.rows, ldy = outputs;
  const int n_row_blocks = (x.m + max_rows - 1) / max_rows;
  alignas(64) float tail[kMaxOne * kBlockCols];
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const unsigned char* block = block_at(j0);
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

// The codes of one vector of a 6-bit unit (quantized_weights.hpp), 0..63 each, from its three chunks' vectors (the
// low-nibble chunk of features 16 j .. + 7, that of 16 j + 8 .. + 15, the high-bits chunk): q[k] holds features
// 16 j + 4 k .. + 3 of each word, a nibble plane's low four bits with the high two moved to bits 4-5.
template <class Vec>
inline void six_bit_codes(typename Vec::I first, typename Vec::I second, typename Vec::I high,
                          typename Vec::I (&q)[4]) {
  q[0] = Vec::template with_crumbs<4>(Vec::low_nibbles(first), high);
  q[1] = Vec::template with_crumbs<2>(Vec::high_nibbles(first), high);
  q[2] = Vec::template with_crumbs<0>(Vec::low_nibbles(second), high);
  q[3] = Vec::template with_crumbs<-2>(Vec::high_nibbles(second), high);
}

// A block of 6-bit codes (quantized_weights.hpp) as the same block of 8-bit codes (code + 96: centred on 128 as
// 8-bit codes are, so that the 8-bit kernels' arithmetic gives the 6-bit sums exactly), scales copied.
template <class Vec>
void six_bit_block_to_eight(const unsigned char* block, const WeightMatrix& six, const WeightMatrix& eight,
                            unsigned char* out) {
  constexpr int64_t kChunk = 128, kStep = Vec::kWidth * 4;  // bytes of one vector
  const int64_t groups = quant_groups(six), units = quant_group_stride(six) / 16;
  const int64_t six_bytes = quant_group_bytes(six), eight_bytes = quant_group_bytes(eight);
  for (int64_t g = 0; g < groups; ++g) {
    const unsigned char* p = block + g * six_bytes;
    unsigned char* o = out + g * eight_bytes;
    for (int64_t u = 0; u < units; ++u, p += 3 * kChunk, o += 4 * kChunk) {
      for (int64_t at = 0; at < kChunk; at += kStep) {
        typename Vec::I q[4];
        six_bit_codes<Vec>(Vec::load(p + at), Vec::load(p + kChunk + at), Vec::load(p + 2 * kChunk + at), q);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) Vec::store(o + k * kChunk + at, Vec::add_bytes(q[k], 96));
      }
    }
    std::copy_n(p, 64, o);  // the scales
  }
}

template <class Rows, class Vec, int kBits, bool kAffine, int kMaxRows, int kMaxOne>
void product(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
             int64_t n_begin, int64_t n_end) {
  const int64_t block_bytes = quant_block_bytes(w);
  const auto* base = static_cast<const unsigned char*>(w.data);
  if constexpr (kBits == 6) {
    // Where three or more register blocks of rows meet each weight block, it is unpacked once to 8-bit codes and
    // the 8-bit kernel runs on it; fewer, the 6-bit kernel unpacks in registers. (One [2048 x 768] product, 2
    // threads, VNNI, the same codes stored as 8 bits taking 0.83-0.91x the time at 32 rows when unpacked in
    // registers; unpacked once per block 0.72-0.81x at 8 rows, 0.90-0.98x at 32.)
    if (x.m > 2 * (x.groups == 1 ? kMaxOne : kMaxRows)) {
      WeightMatrix eight = w;
      eight.quant.bits = 8;
      thread_local std::vector<unsigned char> unpacked;
      unpacked.resize(static_cast<size_t>(quant_block_bytes(eight)));
      return product_blocks<Rows, Vec, 8, false, kMaxRows, kMaxOne>(x, eight, bias, y, ff_glu, n_begin, n_end,
                                                                    [&](int64_t j0) {
        six_bit_block_to_eight<Vec>(base + j0 / kBlockCols * block_bytes, w, eight, unpacked.data());
        return static_cast<const unsigned char*>(unpacked.data());
      });
    }
  }
  product_blocks<Rows, Vec, kBits, kAffine, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end,
                                                               [&](int64_t j0) { return base + j0 / kBlockCols * block_bytes; });
}

template <class Rows, class Vec, int kMaxRows, int kMaxOne>
void product_any(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
                 int64_t n_begin, int64_t n_end) {
  if (w.quant.bits == 8) {
    if (w.quant.affine) return product<Rows, Vec, 8, true, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
    return product<Rows, Vec, 8, false, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
  }
  if (w.quant.bits == 6) return product<Rows, Vec, 6, false, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
  if (w.quant.affine) return product<Rows, Vec, 4, true, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
  product<Rows, Vec, 4, false, kMaxRows, kMaxOne>(x, w, bias, y, ff_glu, n_begin, n_end);
}

}  // namespace actord::cpu::quantized_product
