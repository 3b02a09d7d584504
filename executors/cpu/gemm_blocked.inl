// The GEMM over blocked weights (blocked_weights.hpp), written once over a vector type and included by
// gemm_avx2.cpp and gemm_avx512.cpp. The register block is MR rows of x times the 32 columns of one weight block:
// per input feature, the block's 32 values are loaded and converted in registers (bf16: an AND and a shift), each x
// value is broadcast, and 2 * MR accumulators take the FMAs. Weights are read in storage order (one sequential
// stream per thread, the next block prefetched while the first rows of x use this one); x rows stay in L2 by chunks.
//
// `Vec` provides: static constexpr int kWidth (8 or 16); using V; zero(), fma(a, b, c), broadcast(const float*),
// load_x(const float*), store(float*, V), and
//   template <DType D> static void load_block_cols(const unsigned char* t_values, int half, V& first, V& second):
//   from the 32 values stored for one input feature, columns [half * kWidth, +kWidth) into `first` and
//   [16 + half * kWidth, +kWidth) into `second` (half < 16 / kWidth).
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "executors/cpu/blocked_weights.hpp"

namespace actord::cpu::blocked {

constexpr int64_t kXChunkBytes = 256 * 1024;  // rows of x swept against a block at a time: half of L2
// Input features ahead that the kernel asks L1 for: its weight loads otherwise wait on L2 (measured with
// bench/gemm_bench.cpp: 4 to 16 all help, by 1.1-1.5x at m = 32 to 128).
constexpr int64_t kAhead = 8;

// out[i, half-columns] (+ bias) = x[i, :] . W-block columns, for i < MR; ldo is out's row stride. When kPrefetch,
// also hints the next block (same offsets, `next`) into L2, one stored feature per feature computed.
template <class Vec, DType D, int MR, bool kPrefetch>
void micro_kernel(const float* x, int64_t k, const unsigned char* block, int half, const unsigned char* next,
                  const float* bias, float* out, int64_t ldo) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  constexpr int64_t kStep = kBlockCols * (D == DType::f32 ? 4 : 2);  // bytes stored per input feature
  V acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = Vec::zero();
  for (int64_t t = 0; t < k; ++t) {
    if constexpr (kPrefetch) {
#pragma GCC unroll 2
      for (int64_t b = 0; b < kStep; b += 64) _mm_prefetch(reinterpret_cast<const char*>(next + t * kStep + b), _MM_HINT_T1);
    }
    _mm_prefetch(reinterpret_cast<const char*>(block + (t + kAhead) * kStep), _MM_HINT_T0);
    V w0, w1;
    Vec::template load_block_cols<D>(block + t * kStep, half, w0, w1);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V a = Vec::broadcast(x + i * k + t);
      acc[i][0] = Vec::fma(a, w0, acc[i][0]);
      acc[i][1] = Vec::fma(a, w1, acc[i][1]);
    }
  }
  const int c0 = half * W, c1 = 16 + half * W;
  V b0 = Vec::zero(), b1 = Vec::zero();
  if (bias) {
    b0 = Vec::load_x(bias + c0);
    b1 = Vec::load_x(bias + c1);
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    Vec::store(out + i * ldo + c0, Vec::add(acc[i][0], b0));
    Vec::store(out + i * ldo + c1, Vec::add(acc[i][1], b1));
  }
}

template <class Vec, DType D, int MR>
void run_block(const float* x, int64_t k, const unsigned char* block, int half, const unsigned char* next,
               const float* bias, float* out, int64_t ldo) {
  if (next) return micro_kernel<Vec, D, MR, true>(x, k, block, half, next, bias, out, ldo);
  micro_kernel<Vec, D, MR, false>(x, k, block, half, next, bias, out, ldo);
}

// MR chosen at run time, 1 .. kMaxRows.
template <class Vec, DType D, int kMaxRows>
void run_rows(int rows, const float* x, int64_t k, const unsigned char* block, int half, const unsigned char* next,
              const float* bias, float* out, int64_t ldo) {
  if constexpr (kMaxRows > 1) {
    if (rows < kMaxRows) return run_rows<Vec, D, kMaxRows - 1>(rows, x, k, block, half, next, bias, out, ldo);
  }
  run_block<Vec, D, kMaxRows>(x, k, block, half, next, bias, out, ldo);
}

// y[:, n_begin:n_end] (+ bias) = x W^T for a blocked W; n_begin is a multiple of kBlockCols. Rows of x go by in
// chunks that fit half of L2; within a chunk, each weight block meets every row, in register blocks of at most
// kMaxRows rows (balanced: 32 rows with kMaxRows 12 go as 11 + 11 + 10).
template <class Vec, DType D, int kMaxRows>
void product(const float* x, int m, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
             int64_t n_end) {
  constexpr int kHalves = 16 / Vec::kWidth;
  const int64_t k = w.cols, n = w.rows;
  const int64_t block_bytes = k * kBlockCols * static_cast<int64_t>(dtype_size(D));
  const auto* base = static_cast<const unsigned char*>(w.data);
  const int chunk_rows = static_cast<int>(
      std::max<int64_t>(kMaxRows, kXChunkBytes / (k * 4) / kMaxRows * kMaxRows));
  alignas(64) float tail[kMaxRows * kBlockCols];
  for (int i0 = 0; i0 < m; i0 += chunk_rows) {
    const int rows = std::min(chunk_rows, m - i0);
    const int n_blocks = (rows + kMaxRows - 1) / kMaxRows;
    for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
      const unsigned char* block = base + (j0 / kBlockCols) * block_bytes;
      const unsigned char* next = j0 + kBlockCols < n_end ? block + block_bytes : nullptr;
      const int cols = static_cast<int>(std::min<int64_t>(kBlockCols, n - j0));
      int i = i0;
      for (int b = 0; b < n_blocks; ++b) {
        const int mr = rows / n_blocks + (b < rows % n_blocks ? 1 : 0);
        for (int h = 0; h < kHalves; ++h) {
          const unsigned char* pf = b == 0 && h == 0 ? next : nullptr;
          if (cols == kBlockCols) {
            run_rows<Vec, D, kMaxRows>(mr, x + i * k, k, block, h, pf, bias ? bias + j0 : nullptr,
                                       y + static_cast<int64_t>(i) * n + j0, n);
          } else {
            run_rows<Vec, D, kMaxRows>(mr, x + i * k, k, block, h, pf, nullptr, tail, kBlockCols);
          }
        }
        if (cols < kBlockCols) {
          for (int r = 0; r < mr; ++r) {
            float* yr = y + static_cast<int64_t>(i + r) * n + j0;
            for (int c = 0; c < cols; ++c) yr[c] = tail[r * kBlockCols + c] + (bias ? bias[j0 + c] : 0.0f);
          }
        }
        i += mr;
      }
    }
  }
}

template <class Vec, int kMaxRows>
void product_any(const float* x, int m, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                 int64_t n_end) {
  switch (w.dtype) {
    case DType::f32: return product<Vec, DType::f32, kMaxRows>(x, m, w, bias, y, n_begin, n_end);
    case DType::bf16: return product<Vec, DType::bf16, kMaxRows>(x, m, w, bias, y, n_begin, n_end);
    case DType::f16: return product<Vec, DType::f16, kMaxRows>(x, m, w, bias, y, n_begin, n_end);
    default: break;
  }
  gemm_nt_blocked_portable(x, m, w, bias, y, n_begin, n_end);
}

}  // namespace actord::cpu::blocked
