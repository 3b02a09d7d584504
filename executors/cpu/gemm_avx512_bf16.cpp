// The blocked GEMM on bf16 weights with AVX512-BF16 dot products (groups[].cpu_isa: avx512_bf16): x rounded to bf16
// (to nearest even) once per product, then per pair of input features (t, t + 1) one vdpbf16ps per 16 columns
// adds w[t] x[t] + w[t + 1] x[t + 1] to f32 accumulators: half the multiply instructions of the f32 kernel, the
// products exact, the sums in f32. Compiled with -mavx512bf16; gemm.cpp calls it only when the CPU has it.
//
// A weight block stores, per input feature, its 32 values as 16 32-bit words, word l = (column 16 + l, column l)
// (blocked_weights.hpp). Two features' words make the pairs: (P_t >> 16 | P_t+1 & 0xFFFF0000) holds
// (w[t][l], w[t+1][l]) for columns 0..15, (P_t & 0xFFFF | P_t+1 << 16) the same for columns 16..31.
#include <immintrin.h>

#include <algorithm>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "core/dtype.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu {
namespace {

constexpr __mmask32 kHighHalves = 0xAAAAAAAAu;

// MR rows of bf16 x (pairs: kp 32-bit words per row) against one weight block of k features: out[i, c] (+ bias),
// or with kGlu the gated outputs silu(gate c) * up c of a pack_glu block (columns 0..15 gate, 16..31 up). With
// `next`, hints the next block into L2 as the f32 kernel does: the features t with t % pf_stride == pf_phase, so the
// pf_stride passes over this block (one per register block of rows) fetch it evenly between them.
template <int MR, bool kGlu>
void micro_kernel(const uint32_t* xp, int64_t kp, int64_t k, const unsigned char* block, const unsigned char* next,
                  int pf_phase, int pf_stride, const float* bias, float* out, int64_t ldo) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  constexpr int64_t kStep = kBlockCols * 2;  // bytes per input feature
  int pf_count = pf_stride - pf_phase - 1;  // reaches pf_stride at t = pf_phase, then every pf_stride features
  for (int64_t p = 0; p < kp; ++p) {
    const int64_t t = 2 * p;
    if (next) {
      for (int64_t f = t; f < t + 2; ++f) {
        if (++pf_count >= pf_stride) {
          pf_count = 0;
          _mm_prefetch(reinterpret_cast<const char*>(next + f * kStep), _MM_HINT_T1);
        }
      }
    }
    _mm_prefetch(reinterpret_cast<const char*>(block + (t + 8) * kStep), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(block + (t + 9) * kStep), _MM_HINT_T0);
    const __m512i p0 = _mm512_loadu_si512(block + t * kStep);
    const __m512i p1 = t + 1 < k ? _mm512_loadu_si512(block + (t + 1) * kStep) : _mm512_setzero_si512();
    const __m512bh lo = (__m512bh)(_mm512_mask_blend_epi16(kHighHalves, _mm512_maskz_srli_epi32(0xFFFF, p0, 16), p1));
    const __m512bh hi = (__m512bh)(_mm512_mask_blend_epi16(kHighHalves, p0, _mm512_maskz_slli_epi32(0xFFFF, p1, 16)));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512bh a = (__m512bh)(_mm512_set1_epi32(static_cast<int>(xp[i * kp + p])));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, lo);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, hi);
    }
  }
  if constexpr (kGlu) {
    alignas(64) float gate[16], up[16];
    for (int i = 0; i < MR; ++i) {
      _mm512_store_ps(gate, acc[i][0]);
      _mm512_store_ps(up, acc[i][1]);
      float* o = out + i * ldo;
      for (int l = 0; l < 16; ++l) o[l] = silu(gate[l]) * up[l];
    }
  } else {
    const __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 b1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      _mm512_storeu_ps(out + i * ldo, _mm512_add_ps(acc[i][0], b0));
      _mm512_storeu_ps(out + i * ldo + 16, _mm512_add_ps(acc[i][1], b1));
    }
  }
}

template <int MR, bool kGlu>
void run_rows(int rows, const uint32_t* xp, int64_t kp, int64_t k, const unsigned char* block,
              const unsigned char* next, int pf_phase, int pf_stride, const float* bias, float* out, int64_t ldo) {
  if constexpr (MR > 1) {
    if (rows < MR) return run_rows<MR - 1, kGlu>(rows, xp, kp, k, block, next, pf_phase, pf_stride, bias, out, ldo);
  }
  micro_kernel<MR, kGlu>(xp, kp, k, block, next, pf_phase, pf_stride, bias, out, ldo);
}

// As blocked::product (gemm_blocked.inl) over bf16 x pairs: every weight block meets the rows in register blocks of
// at most 12 (balanced); the last, partial block goes through a 32-column scratch row.
template <bool kGlu>
void product(const Bf16Rows& x, const WeightMatrix& w, const float* bias, float* y, int64_t ldy, int64_t outputs,
             int64_t n_begin, int64_t n_end) {
  constexpr int kMaxRows = 12;
  constexpr int kOutsPerBlock = kGlu ? kBlockCols / 2 : kBlockCols;
  const int64_t k = w.cols, kp = x.pairs;
  const int64_t block_bytes = k * kBlockCols * 2;
  const auto* base = static_cast<const unsigned char*>(w.data);
  const int n_blocks = (x.m + kMaxRows - 1) / kMaxRows;
  alignas(64) float tail[kMaxRows * kBlockCols];
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const unsigned char* block = base + (j0 / kBlockCols) * block_bytes;
    const unsigned char* next = j0 + kBlockCols < n_end ? block + block_bytes : nullptr;
    const int64_t out0 = j0 / kBlockCols * kOutsPerBlock;
    const int outs = static_cast<int>(std::min<int64_t>(kOutsPerBlock, outputs - out0));
    int i = 0;
    for (int b = 0; b < n_blocks; ++b) {
      const int mr = x.m / n_blocks + (b < x.m % n_blocks ? 1 : 0);
      const uint32_t* xp = x.data + static_cast<int64_t>(i) * kp;
      if (outs == kOutsPerBlock) {
        run_rows<kMaxRows, kGlu>(mr, xp, kp, k, block, next, b, n_blocks, bias ? bias + j0 : nullptr,
                                 y + i * ldy + out0, ldy);
      } else {
        run_rows<kMaxRows, false>(mr, xp, kp, k, block, next, b, n_blocks, nullptr, tail, kBlockCols);
        for (int r = 0; r < mr; ++r) {
          float* yr = y + (i + r) * ldy + out0;
          const float* tr = tail + r * kBlockCols;
          for (int c = 0; c < outs; ++c) yr[c] = kGlu ? silu(tr[c]) * tr[16 + c] : tr[c] + (bias ? bias[j0 + c] : 0.0f);
        }
      }
      i += mr;
    }
  }
}

}  // namespace

void to_bf16_pairs(const float* x, int m, int64_t k, uint32_t* out) {
  const int64_t kp = (k + 1) / 2;
  for (int i = 0; i < m; ++i) {
    const float* row = x + i * k;
    auto* dst = reinterpret_cast<uint16_t*>(out + i * kp);
    int64_t t = 0;
    for (; t + 32 <= k; t += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + t + 16), _mm512_loadu_ps(row + t));
      _mm512_storeu_si512(dst + t, (__m512i)v);
    }
    for (; t < k; ++t) dst[t] = f32_to_bf16(row[t]);
    if (k % 2) dst[k] = 0;
  }
}

void round_to_bf16_avx512(const float* x, int64_t n, float* out) {
  int64_t t = 0;
  for (; t + 16 <= n; t += 16) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + t));
    _mm512_storeu_ps(out + t, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  for (; t < n; ++t) out[t] = bf16_to_f32(f32_to_bf16(x[t]));
}

float bf16_dot_chains(long iterations) {
  __m512 acc[16];
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(0.5f));
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, a);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < 16; ++j) sum = _mm512_add_ps(sum, acc[j]);
  return _mm512_reduce_add_ps(sum);
}

void gemm_nt_blocked_avx512_bf16(const Bf16Rows& x, const WeightMatrix& w, const float* bias, float* y,
                                 int64_t n_begin, int64_t n_end) {
  product<false>(x, w, bias, y, w.rows, w.rows, n_begin, n_end);
}

void gemm_nt_glu_avx512_bf16(const Bf16Rows& x, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                             int64_t n_end) {
  product<true>(x, w, nullptr, y, ff, ff, n_begin, n_end);
}

}  // namespace actord::cpu
