// The GEMM over quantized weights (quantized_weights.hpp) with int8 activations and AVX512-VNNI dot products: x is
// quantized per row (quantized_x_int8: codes q, one scale s_x per row, integer sums of q per group), and per chunk
// of the block one vpdpbusd per 16 columns and row adds four features' (unsigned weight code) x (signed x code)
// products to int32 sums (4-bit codes: the low and the high nibbles, two vpdpbusd). At a group's end the sums are
// exact integers S; the total takes scale * S + offset * sum(q), symmetric codes as scale * (S - zero * sum(q)) in
// integers; the output is s_x * total. Compiled with -mavx512vnni; gemm.cpp calls it only when the CPU has it.
#include <immintrin.h>

#include <algorithm>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu {
namespace {

constexpr int64_t kChunk = 128;

inline __m512 load_f16(const unsigned char* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// MR rows of int8 x against one block of 32 columns: out[i, c] (+ bias), or with kGlu silu(gate c) * up c.
template <int kBits, int MR, bool kAffine, bool kGlu, bool kOneGroup>
void micro_kernel(const QuantizedX& x, int row0, const WeightMatrix& w, const unsigned char* block,
                  const float* bias, float* out, int64_t ldo) {
  constexpr int kFeatures = kBits == 8 ? 4 : 8;
  const int64_t chunks = x.group_stride / kFeatures;
  const int64_t group_bytes = quant_group_bytes(w);
  const auto* xr = reinterpret_cast<const int32_t*>(x.codes + row0 * x.ld);  // 4 codes per word
  const int64_t ldw = x.ld / 4;
  const int32_t* sums = x.code_sums + row0 * x.groups;
  __m512 total[kOneGroup ? 1 : MR][2];
  if constexpr (!kOneGroup) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) total[i][0] = total[i][1] = _mm512_setzero_ps();
  }
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  __m512 result[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) result[i][0] = result[i][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < x.groups; ++g) {
    const unsigned char* p = block + g * group_bytes;
    __m512i acc[MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
    const int32_t* xg = xr + g * x.group_stride / 4;
    for (int64_t ch = 0; ch < chunks; ++ch, p += kChunk) {
      _mm_prefetch(reinterpret_cast<const char*>(p + 8 * kChunk), _MM_HINT_T0);
      const __m512i w0 = _mm512_loadu_si512(p), w1 = _mm512_loadu_si512(p + 64);
      if constexpr (kBits == 8) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const __m512i a = _mm512_set1_epi32(xg[i * ldw + ch]);
          acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, a);
          acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, a);
        }
      } else {
        const __m512i lo0 = _mm512_and_si512(w0, low_nibbles), lo1 = _mm512_and_si512(w1, low_nibbles);
        const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi32(w0, 4), low_nibbles);
        const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi32(w1, 4), low_nibbles);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const __m512i a_lo = _mm512_set1_epi32(xg[i * ldw + 2 * ch]);
          const __m512i a_hi = _mm512_set1_epi32(xg[i * ldw + 2 * ch + 1]);
          acc[i][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[i][0], lo0, a_lo), hi0, a_hi);
          acc[i][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[i][1], lo1, a_lo), hi1, a_hi);
        }
      }
    }
    const __m512 s0 = load_f16(p), s1 = load_f16(p + 32);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const int32_t code_sum = sums[i * x.groups + g];
      __m512 r0, r1;
      if constexpr (kAffine) {
        const __m512 xs = _mm512_set1_ps(static_cast<float>(code_sum));
        r0 = _mm512_fmadd_ps(load_f16(p + 64), xs, _mm512_mul_ps(s0, _mm512_maskz_cvtepi32_ps(0xFFFF, acc[i][0])));
        r1 = _mm512_fmadd_ps(load_f16(p + 96), xs, _mm512_mul_ps(s1, _mm512_maskz_cvtepi32_ps(0xFFFF, acc[i][1])));
      } else {
        const __m512i zs = _mm512_set1_epi32(code_sum * (kBits == 8 ? 128 : 8));
        r0 = _mm512_mul_ps(s0, _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(acc[i][0], zs)));
        r1 = _mm512_mul_ps(s1, _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(acc[i][1], zs)));
      }
      if constexpr (kOneGroup) {
        result[i][0] = r0;
        result[i][1] = r1;
      } else {
        total[i][0] = _mm512_add_ps(total[i][0], r0);
        total[i][1] = _mm512_add_ps(total[i][1], r1);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    const __m512 sx = _mm512_set1_ps(x.row_scales[row0 + i]);
    const __m512 r0 = _mm512_mul_ps(sx, kOneGroup ? result[i][0] : total[kOneGroup ? 0 : i][0]);
    const __m512 r1 = _mm512_mul_ps(sx, kOneGroup ? result[i][1] : total[kOneGroup ? 0 : i][1]);
    if constexpr (kGlu) {
      alignas(64) float gate[16], up[16];
      _mm512_store_ps(gate, r0);
      _mm512_store_ps(up, r1);
      float* o = out + i * ldo;
#pragma omp simd
      for (int l = 0; l < 16; ++l) o[l] = silu(gate[l]) * up[l];
    } else {
      _mm512_storeu_ps(out + i * ldo, bias ? _mm512_add_ps(r0, _mm512_loadu_ps(bias)) : r0);
      _mm512_storeu_ps(out + i * ldo + 16, bias ? _mm512_add_ps(r1, _mm512_loadu_ps(bias + 16)) : r1);
    }
  }
}

template <int kBits, int MR, bool kAffine, bool kGlu, bool kOneGroup>
void run_rows(int rows, const QuantizedX& x, int row0, const WeightMatrix& w, const unsigned char* block,
              const float* bias, float* out, int64_t ldo) {
  if constexpr (MR > 1) {
    if (rows < MR) return run_rows<kBits, MR - 1, kAffine, kGlu, kOneGroup>(rows, x, row0, w, block, bias, out, ldo);
  }
  micro_kernel<kBits, MR, kAffine, kGlu, kOneGroup>(x, row0, w, block, bias, out, ldo);
}

// 32 registers: 6 rows x 2 of int32 sums and of f32 totals (12 rows when a row is one group), as
// quantized::product (gemm_quantized.inl) arranges them.
template <int kBits, bool kAffine>
void product(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
             int64_t n_begin, int64_t n_end) {
  constexpr int kMaxRows = 6, kMaxOne = 12;
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
    const bool whole = outs == outs_per_block;
    const float* bias_here = bias ? bias + j0 : nullptr;
    int i = 0;
    for (int b = 0; b < n_row_blocks; ++b) {
      const int mr = x.m / n_row_blocks + (b < x.m % n_row_blocks ? 1 : 0);
      float* yb = y + i * ldy + out0;
      auto run = [&](auto glu_tag, auto one_tag) {
        constexpr bool kG = decltype(glu_tag)::value, kO = decltype(one_tag)::value;
        constexpr int kR = kO ? kMaxOne : kMaxRows;
        if (whole) {
          run_rows<kBits, kR, kAffine, kG, kO>(mr, x, i, w, block, bias_here, yb, ldy);
        } else {
          run_rows<kBits, kR, kAffine, false, kO>(mr, x, i, w, block, nullptr, tail, kBlockCols);
        }
      };
      if (glu) {
        one_group ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
      } else {
        one_group ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
      }
      if (!whole) {
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

}  // namespace

void gemm_nt_quantized_avx512_vnni(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                   int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  if (w.quant.bits == 8) {
    if (w.quant.affine) return product<8, true>(x, w, bias, y, ff_glu, n_begin, n_end);
    return product<8, false>(x, w, bias, y, ff_glu, n_begin, n_end);
  }
  if (w.quant.affine) return product<4, true>(x, w, bias, y, ff_glu, n_begin, n_end);
  product<4, false>(x, w, bias, y, ff_glu, n_begin, n_end);
}

}  // namespace actord::cpu
