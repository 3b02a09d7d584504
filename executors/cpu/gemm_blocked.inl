// The GEMM over blocked weights (blocked_weights.hpp), written once over a vector type and included by
// gemm_avx2.cpp and gemm_avx512.cpp. The register block is MR rows of x times the 32 columns of one weight block:
// per input feature, the block's 32 values are loaded and converted in registers (bf16: an AND and a shift), each x
// value is broadcast, and 2 * MR accumulators take the FMAs. Weights are read in storage order (one sequential
// stream per thread, the next block prefetched a share per pass over this one); x rows stay in L2 by chunks.
//
// `Vec` provides: static constexpr int kWidth (8 or 16); using V; zero(), fma(a, b, c), broadcast(const float*),
// load_x(const float*), store(float*, V), and
//   template <DType D> static void load_block_cols(const unsigned char* t_values, int half, V& first, V& second):
//   from the 32 values stored for one input feature, columns [half * kWidth, +kWidth) into `first` and
//   [16 + half * kWidth, +kWidth) into `second` (half < 16 / kWidth).
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "core/status.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu::blocked {

// Input features ahead that the kernel asks L1 for: its weight loads otherwise wait on L2 (measured with
// bench/gemm_bench.cpp on an Intel Xeon: 4 to 16 all help, by 1.1-1.5x at m = 32 to 128; on an AMD EPYC (Zen 4)
// bench/quant_bench.cpp's decode step: 32 beats 8 by 4-5% at m = 1 to 32, 1-2% at 128: 2 KiB ahead).
constexpr int64_t kAhead = 32;

// One row's results of a register block for the block's columns [c, c + W) (`first`) and [16 + c, +W) (`second`):
// gated (kGlu: a pack_glu block, the gate first and the up projection second), out[c + l] = silu(gate) * up; plain,
// out[c + l] and out[16 + c + l], the bias added (none: zero).
template <class Vec, bool kGlu>
[[gnu::always_inline]] inline void store_results(typename Vec::V first, typename Vec::V second, int c,
                                                 const float* bias, float* out) {
  if constexpr (kGlu) {
    alignas(64) float gate[Vec::kWidth], up[Vec::kWidth];
    Vec::store(gate, first);
    Vec::store(up, second);
#pragma omp simd
    for (int l = 0; l < Vec::kWidth; ++l) out[c + l] = silu(gate[l]) * up[l];
  } else {
    Vec::store(out + c, Vec::add(first, bias ? Vec::load_x(bias + c) : Vec::zero()));
    Vec::store(out + 16 + c, Vec::add(second, bias ? Vec::load_x(bias + 16 + c) : Vec::zero()));
  }
}

// The register block's results for MR rows of x against one weight block (half `half` of it when vectors are
// narrower than 16): plain, out[i, c] (+ bias) for the block's columns c; or, when kGlu (a pack_glu block: columns
// 0..15 gate, 16..31 up), out[i, c] = silu(gate c) * up c for its 16 outputs. ldo is out's row stride. When
// kPrefetch, also hints the next block (`next`) into L2: the features t with t % pf_stride == pf_phase, so that the
// pf_stride passes over a block (one per register block of rows) fetch the next one evenly between them.
// Not inlined: each register block's kernel gets the registers to itself (inlined into product(), the AVX-512 fused
// instances kept some accumulators in memory).
template <class Vec, DType D, int MR, bool kPrefetch, bool kGlu>
[[gnu::noinline]] void micro_kernel(const float* x, int64_t k, const unsigned char* block, int half,
                                    const unsigned char* next, int pf_phase, int pf_stride, const float* bias,
                                    float* out, int64_t ldo) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  constexpr int64_t kStep = kBlockCols * (D == DType::f32 ? 4 : 2);  // bytes stored per input feature
  V acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = Vec::zero();
  int pf_count = pf_stride - pf_phase - 1;  // reaches pf_stride at t = pf_phase, then every pf_stride features
  for (int64_t t = 0; t < k; ++t) {
    if constexpr (kPrefetch) {
      if (++pf_count >= pf_stride) {
        pf_count = 0;
#pragma GCC unroll 2
        for (int64_t b = 0; b < kStep; b += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(next + t * kStep + b), _MM_HINT_T1);
        }
      }
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
  // Unrolled, so that acc[i] is named by constants: indexed at run time, the compiler keeps acc in memory and stores
  // every accumulator on each step of the loop above (AVX2: the fused product 1.4-1.6x slower).
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) store_results<Vec, kGlu>(acc[i][0], acc[i][1], half * W, bias, out + i * ldo);
}

// micro_kernel over both halves of a block in one pass, for vectors of 8 (kHalves 2) and at most kWholeRows rows:
// per input feature the block's whole 64-byte row is read once (two half passes read each line twice, and each
// half's two accumulator chains wait on the FMA latency: a decode's one-row products ran at half the AVX-512 rate).
// Each output's accumulator takes the same FMAs in the same order as in the half passes: the same bits.
constexpr int kWholeRows = 3;  // 4 MR accumulators, a block's two converted vectors, a broadcast, the mask: 16

template <class Vec, DType D, int MR, bool kPrefetch, bool kGlu>
[[gnu::noinline]] void micro_kernel_whole(const float* x, int64_t k, const unsigned char* block,
                                          const unsigned char* next, const float* bias, float* out, int64_t ldo) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  static_assert(W == 8, "both halves of a block are four vectors of 8");
  constexpr int64_t kStep = kBlockCols * (D == DType::f32 ? 4 : 2);
  V acc[MR][4];  // columns [0, 8), [8, 16), [16, 24), [24, 32)
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = Vec::zero();
  for (int64_t t = 0; t < k; ++t) {
    if constexpr (kPrefetch) {
#pragma GCC unroll 2
      for (int64_t b = 0; b < kStep; b += 64) _mm_prefetch(reinterpret_cast<const char*>(next + t * kStep + b), _MM_HINT_T1);
    }
    _mm_prefetch(reinterpret_cast<const char*>(block + (t + kAhead) * kStep), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      V w0, w1;  // columns [8 h, +8) and [16 + 8 h, +8)
      Vec::template load_block_cols<D>(block + t * kStep, h, w0, w1);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        // At 3 rows, broadcast again for each half: kept from the first, the 3 broadcasts take registers the
        // accumulators need (GCC then spilled one). The empty asm hides that the address is the same.
        const float* xi = x + i * k + t;
        if constexpr (MR > 2) __asm__ volatile("" : "+r"(xi));
        const V a = Vec::broadcast(xi);
        acc[i][h] = Vec::fma(a, w0, acc[i][h]);
        acc[i][2 + h] = Vec::fma(a, w1, acc[i][2 + h]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) store_results<Vec, kGlu>(acc[i][h], acc[i][2 + h], h * W, bias, out + i * ldo);
  }
}

template <class Vec, DType D, int MR, bool kGlu>
void run_rows_whole(int rows, const float* x, int64_t k, const unsigned char* block, const unsigned char* next,
                    const float* bias, float* out, int64_t ldo) {
  if constexpr (MR > 1) {
    if (rows < MR) return run_rows_whole<Vec, D, MR - 1, kGlu>(rows, x, k, block, next, bias, out, ldo);
  }
  if (next) return micro_kernel_whole<Vec, D, MR, true, kGlu>(x, k, block, next, bias, out, ldo);
  micro_kernel_whole<Vec, D, MR, false, kGlu>(x, k, block, next, bias, out, ldo);
}

// MR chosen at run time, 1 .. kMaxRows; prefetching when `next` is set.
template <class Vec, DType D, int kMaxRows, bool kGlu>
void run_rows(int rows, const float* x, int64_t k, const unsigned char* block, int half, const unsigned char* next,
              int pf_phase, int pf_stride, const float* bias, float* out, int64_t ldo) {
  if constexpr (kMaxRows > 1) {
    if (rows < kMaxRows) {
      return run_rows<Vec, D, kMaxRows - 1, kGlu>(rows, x, k, block, half, next, pf_phase, pf_stride, bias, out, ldo);
    }
  }
  if (next) return micro_kernel<Vec, D, kMaxRows, true, kGlu>(x, k, block, half, next, pf_phase, pf_stride, bias, out, ldo);
  micro_kernel<Vec, D, kMaxRows, false, kGlu>(x, k, block, half, next, pf_phase, pf_stride, bias, out, ldo);
}

// y (row stride ldy) from x W^T for a blocked W, weight columns [n_begin, n_end) (n_begin a multiple of
// kBlockCols): plain, y[:, j] (+ bias) = x . W[j]; or, when kGlu, the gated outputs y[:, j / 2 ...] of pack_glu
// blocks, `outputs` (ff) in all. Rows of x go by in equal chunks of at most half of L2 (x_chunk_bytes()); within a chunk, each weight block
// meets every row, in register blocks of at most kMaxRows rows (balanced: 32 rows with kMaxRows 12 go as
// 11 + 11 + 10).
template <class Vec, DType D, int kMaxRows, bool kGlu>
void product(const float* x, int m, const WeightMatrix& w, const float* bias, float* y, int64_t ldy, int64_t outputs,
             int64_t n_begin, int64_t n_end) {
  if (m <= 0) return;
  constexpr int kHalves = 16 / Vec::kWidth;
  constexpr int kOutsPerBlock = kGlu ? kBlockCols / 2 : kBlockCols;
  const int64_t k = w.cols;
  const int64_t block_bytes = k * kBlockCols * static_cast<int64_t>(dtype_size(D));
  const auto* base = static_cast<const unsigned char*>(w.data);
  // As few chunks as fit, of equal size (each chunk streams the weights once more: 32 rows must not go as 24 + 8).
  const int max_chunk_rows = static_cast<int>(std::max<int64_t>(kMaxRows, x_chunk_bytes() / (k * 4)));
  const int n_chunks = (m + max_chunk_rows - 1) / max_chunk_rows;
  const int chunk_rows = (m + n_chunks - 1) / n_chunks;
  alignas(64) float tail[kMaxRows * kBlockCols];
  for (int i0 = 0; i0 < m; i0 += chunk_rows) {
    const int rows = std::min(chunk_rows, m - i0);
    const int n_blocks = (rows + kMaxRows - 1) / kMaxRows;
    for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
      const unsigned char* block = base + (j0 / kBlockCols) * block_bytes;
      const unsigned char* next = j0 + kBlockCols < n_end ? block + block_bytes : nullptr;
      const int64_t out0 = j0 / kBlockCols * kOutsPerBlock;  // first output of this block
      const int outs = static_cast<int>(std::min<int64_t>(kOutsPerBlock, outputs - out0));
      int i = i0;
      if constexpr (kHalves == 2) {
        if (rows <= kWholeRows && outs == kOutsPerBlock) {  // one pass over both halves
          run_rows_whole<Vec, D, kWholeRows, kGlu>(rows, x + i * k, k, block, next, bias ? bias + j0 : nullptr,
                                                   y + static_cast<int64_t>(i) * ldy + out0, ldy);
          continue;
        }
      }
      for (int b = 0; b < n_blocks; ++b) {
        const int mr = rows / n_blocks + (b < rows % n_blocks ? 1 : 0);
        for (int h = 0; h < kHalves; ++h) {
          // Every pass over the block (row block b, half h) prefetches its share of the next block.
          const int phase = b * kHalves + h, stride = n_blocks * kHalves;
          if (outs == kOutsPerBlock) {
            run_rows<Vec, D, kMaxRows, kGlu>(mr, x + i * k, k, block, h, next, phase, stride, bias ? bias + j0 : nullptr,
                                             y + static_cast<int64_t>(i) * ldy + out0, ldy);
          } else {  // the last, partial block: all 32 columns into `tail`, then the valid outputs
            run_rows<Vec, D, kMaxRows, false>(mr, x + i * k, k, block, h, next, phase, stride, nullptr, tail,
                                              kBlockCols);
          }
        }
        if (outs < kOutsPerBlock) {
          for (int r = 0; r < mr; ++r) {
            float* yr = y + static_cast<int64_t>(i + r) * ldy + out0;
            const float* tr = tail + r * kBlockCols;
            for (int c = 0; c < outs; ++c) {
              if constexpr (kGlu) {
                yr[c] = silu(tr[c]) * tr[16 + c];
              } else {
                yr[c] = tr[c] + (bias ? bias[j0 + c] : 0.0f);
              }
            }
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
    case DType::f32: return product<Vec, DType::f32, kMaxRows, false>(x, m, w, bias, y, w.rows, w.rows, n_begin, n_end);
    case DType::bf16: return product<Vec, DType::bf16, kMaxRows, false>(x, m, w, bias, y, w.rows, w.rows, n_begin, n_end);
    case DType::f16: return product<Vec, DType::f16, kMaxRows, false>(x, m, w, bias, y, w.rows, w.rows, n_begin, n_end);
    case DType::i8: break;  // no weight is i8 (quantized ones are QuantizedMatrix codes)
  }
  ACTORD_CHECK_MSG(false, "an i8 WeightMatrix");
}

template <class Vec, int kMaxRows>
void glu_any(const float* x, int m, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin, int64_t n_end) {
  switch (w.dtype) {
    case DType::f32: return product<Vec, DType::f32, kMaxRows, true>(x, m, w, nullptr, y, ff, ff, n_begin, n_end);
    case DType::bf16: return product<Vec, DType::bf16, kMaxRows, true>(x, m, w, nullptr, y, ff, ff, n_begin, n_end);
    case DType::f16: return product<Vec, DType::f16, kMaxRows, true>(x, m, w, nullptr, y, ff, ff, n_begin, n_end);
    case DType::i8: break;  // no weight is i8 (quantized ones are QuantizedMatrix codes)
  }
  ACTORD_CHECK_MSG(false, "an i8 WeightMatrix");
}

}  // namespace actord::cpu::blocked
