// The batched GEMM (many rows of x: prefill, large decode batches), written once over a vector type and included
// by gemm_avx2.cpp and gemm_avx512.cpp. x arrives packed (see PackedX in gemm.hpp): blocks of MB = MRV * kWidth rows,
// each stored k-major, so one vector load reads MB/MRV consecutive rows at one input feature. The micro-kernel keeps
// an MB x NR block of y in MRV * NR vector registers (outer products: a vector of x rows times a broadcast weight),
// so there is no horizontal reduction and every weight is converted from bf16/f16 once per call, into a small f32
// panel that the whole of x then sweeps.
//
// `Vec` provides, besides what gemm_tiles.inl needs: static V broadcast(const float*).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "executors/cpu/aligned_vector.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/gemm_tiles.inl"

namespace actord::cpu::packed {

// Input features per weight panel: NR rows of KC floats (24-48 KB) stay in L1/L2 while x streams past.
constexpr int64_t kKc = 512;
constexpr int64_t kPanelStride = kKc + 16;

// acc[r * MB + l] (+)= sum_t xp[t * MB + l] * wp[r * ldw + t], for t < kc (MB = MRV * kWidth): starts from zero when
// `first`, else adds to what acc holds.
template <class Vec, int MRV, int NR>
void micro_kernel(const float* xp, const float* wp, int64_t ldw, int64_t kc, bool first, float* acc_io) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  constexpr int MB = MRV * W;
  // The loops over v and r must be unrolled for acc to live in registers (GCC leaves some shapes rolled otherwise).
  V acc[MRV][NR];
#pragma GCC unroll 8
  for (int v = 0; v < MRV; ++v)
#pragma GCC unroll 32
    for (int r = 0; r < NR; ++r) acc[v][r] = first ? Vec::zero() : Vec::load_x(acc_io + r * MB + v * W);
  for (int64_t t = 0; t < kc; ++t) {
    V xv[MRV];
#pragma GCC unroll 8
    for (int v = 0; v < MRV; ++v) xv[v] = Vec::load_x(xp + t * MB + v * W);
#pragma GCC unroll 32
    for (int r = 0; r < NR; ++r) {
      const V b = Vec::broadcast(wp + r * ldw + t);
#pragma GCC unroll 8
      for (int v = 0; v < MRV; ++v) acc[v][r] = Vec::fma(xv[v], b, acc[v][r]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < MRV; ++v) Vec::store(acc_io + r * MB + v * W, acc[v][r]);
}

// Hints the cache to fetch rows [j0, j0 + rows) x features [t0, t0 + kc) of w, so that the DRAM reads of the next
// panel overlap the arithmetic on this one.
inline void prefetch_panel(const WeightMatrix& w, int64_t j0, int rows, int64_t t0, int64_t kc) {
  const int64_t esize = dtype_size(w.dtype);
  for (int r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(w.row(j0 + r)) + t0 * esize;
    for (int64_t off = 0; off < kc * esize; off += 64) _mm_prefetch(row + off, _MM_HINT_T1);
  }
}

// y[:, n_begin:n_end] (+ bias) for the packed x; x.block_rows must be MRV * kWidth. x is taken kChunkRows rows at a
// time (its packed slice stays in L2); for each NR weight rows, the input features go by in kKc slices (converted
// into an f32 panel), each swept by every block of the chunk; partial sums wait in a per-block buffer, and y is
// written once, transposed, at the end.
template <class Vec, int MRV, int NR>
void rows(const PackedX& xp, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin, int64_t n_end) {
  constexpr int MB = MRV * Vec::kWidth;
  constexpr int kChunkBlocks = std::max(1, 128 / MB);
  const int64_t k = w.cols, n = w.rows;
  const int blocks = (xp.m + MB - 1) / MB;
  thread_local aligned_vector<float> panel, partial;
  panel.resize(static_cast<size_t>(NR * kPanelStride));
  partial.resize(static_cast<size_t>(kChunkBlocks) * NR * MB);
  for (int b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int b1 = std::min(blocks, b0 + kChunkBlocks);
    for (int64_t j0 = n_begin; j0 < n_end; j0 += NR) {
      const int nr = static_cast<int>(std::min<int64_t>(NR, n_end - j0));
      for (int64_t t0 = 0; t0 < k; t0 += kKc) {
        const int64_t kc = std::min(kKc, k - t0);
        // Panel rows are kKc + 16 floats apart: rows a power of two apart would share L1 sets and evict each other.
        for (int r = 0; r < NR; ++r) {
          float* dst = panel.data() + r * kPanelStride;
          if (r < nr) {
            tiles::convert_span<Vec>(w.dtype, w.row(j0 + r) + t0 * dtype_size(w.dtype), dst, kc);
          } else {
            std::fill_n(dst, kc, 0.0f);
          }
        }
        if (t0 + kKc < k) {
          prefetch_panel(w, j0, nr, t0 + kKc, std::min(kKc, k - t0 - kKc));
        } else if (j0 + NR < n_end) {
          prefetch_panel(w, j0 + NR, static_cast<int>(std::min<int64_t>(NR, n_end - j0 - NR)), 0, std::min(kKc, k));
        }
        for (int b = b0; b < b1; ++b) {
          micro_kernel<Vec, MRV, NR>(xp.data + (b * k + t0) * MB, panel.data(), kPanelStride, kc, t0 == 0,
                                     partial.data() + static_cast<size_t>(b - b0) * NR * MB);
        }
      }
      for (int b = b0; b < b1; ++b) {
        const float* acc = partial.data() + static_cast<size_t>(b - b0) * NR * MB;
        const int rows_here = std::min(MB, xp.m - b * MB);
        for (int l = 0; l < rows_here; ++l) {
          float* yrow = y + static_cast<int64_t>(b * MB + l) * n + j0;
          for (int r = 0; r < nr; ++r) yrow[r] = acc[r * MB + l] + (bias ? bias[j0 + r] : 0.0f);
        }
      }
    }
  }
}

}  // namespace actord::cpu::packed
