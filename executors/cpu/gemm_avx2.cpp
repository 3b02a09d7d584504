// AVX2 + FMA + F16C micro-kernels of gemm_nt (compiled with -mavx2 -mfma -mf16c; only called when the CPU has
// them). A micro-tile computes MR rows of x against NR weight rows, keeping MR*NR 8-wide accumulators in
// registers; each weight vector is loaded (and converted from bf16/f16) once per tile and used MR times.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "executors/cpu/gemm.hpp"

namespace actord::cpu {
namespace {

template <DType D>
inline __m256 load8(const unsigned char* p) {
  if constexpr (D == DType::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (D == DType::bf16) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

template <DType D>
inline float load1(const unsigned char* p) {
  float v;
  convert_to_f32(D, p, &v, 1);
  return v;
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int64_t kPrefetchBytes = 2048;

// y[i, j + r] for i < MR, r < NR.
template <DType D, int MR, int NR>
void tile(const float* x, int64_t k, const WeightMatrix& w, int64_t j, const float* bias, float* y, int64_t ldy) {
  constexpr int64_t esize = D == DType::f32 ? 4 : 2;
  const unsigned char* wr[NR];
  for (int r = 0; r < NR; ++r) wr[r] = w.row(j + r);
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= k; t += 8) {
    __m256 wv[NR];
    if constexpr (MR <= 2) {
      // Decode reads each weight once, from DRAM: ask for it ahead of time, a cache line per row every 64 bytes.
      if ((t * esize) % 64 == 0) {
        for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(wr[r] + t * esize) + kPrefetchBytes,
                                                  _MM_HINT_T0);
      }
    }
    for (int r = 0; r < NR; ++r) wv[r] = load8<D>(wr[r] + t * esize);
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + t);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  float out[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) out[i][r] = hsum(acc[i][r]);
  for (; t < k; ++t) {
    for (int r = 0; r < NR; ++r) {
      const float wf = load1<D>(wr[r] + t * esize);
      for (int i = 0; i < MR; ++i) out[i][r] += x[i * k + t] * wf;
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) y[i * ldy + j + r] = out[i][r] + (bias ? bias[j + r] : 0.0f);
}

template <DType D, int NR>
void tile_rows(const float* x, int mr, int64_t k, const WeightMatrix& w, int64_t j, const float* bias, float* y,
               int64_t ldy) {
  switch (mr) {
    case 1: return tile<D, 1, NR>(x, k, w, j, bias, y, ldy);
    case 2: return tile<D, 2, NR>(x, k, w, j, bias, y, ldy);
    case 3: return tile<D, 3, NR>(x, k, w, j, bias, y, ldy);
    default: return tile<D, 4, NR>(x, k, w, j, bias, y, ldy);
  }
}

template <DType D>
void rows(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin, int64_t n_end) {
  const int64_t k = w.cols, n = w.rows;
  constexpr int kRowBlock = 64;  // rows of x kept hot in L2 while the weight rows stream past
  // Few rows of x (decode): 4 weight rows per tile, more loads in flight; else 4x3 tiles (16 registers).
  const int nr = m < 4 ? 4 : 3;
  for (int i0 = 0; i0 < m; i0 += kRowBlock) {
    const int i1 = std::min(m, i0 + kRowBlock);
    for (int64_t j = n_begin; j < n_end; j += nr) {
      const int64_t cols = std::min<int64_t>(nr, n_end - j);
      for (int i = i0; i < i1; i += 4) {
        const int mr = std::min(4, i1 - i);
        const float* xi = x + static_cast<int64_t>(i) * k;
        float* yi = y + static_cast<int64_t>(i) * n;
        switch (cols) {
          case 1: tile_rows<D, 1>(xi, mr, k, w, j, bias, yi, n); break;
          case 2: tile_rows<D, 2>(xi, mr, k, w, j, bias, yi, n); break;
          case 3: tile_rows<D, 3>(xi, mr, k, w, j, bias, yi, n); break;
          default: tile_rows<D, 4>(xi, mr, k, w, j, bias, yi, n); break;
        }
      }
    }
  }
}

}  // namespace

void convert_rows_to_f32_avx2(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out) {
  const int64_t k = w.cols;
  for (int64_t r = 0; r < rows; ++r) {
    const unsigned char* src = w.row(row_begin + r);
    float* dst = out + r * k;
    int64_t t = 0;
    switch (w.dtype) {
      case DType::f32:
        std::memcpy(dst, src, size_t(k) * 4);
        t = k;
        break;
      case DType::bf16:
        for (; t + 8 <= k; t += 8) _mm256_storeu_ps(dst + t, load8<DType::bf16>(src + t * 2));
        break;
      case DType::f16:
        for (; t + 8 <= k; t += 8) _mm256_storeu_ps(dst + t, load8<DType::f16>(src + t * 2));
        break;
    }
    if (t < k) convert_to_f32(w.dtype, src + t * dtype_size(w.dtype), dst + t, size_t(k - t));
  }
}

void gemm_nt_rows_avx2(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                       int64_t n_end) {
  switch (w.dtype) {
    case DType::f32: return rows<DType::f32>(x, w, bias, y, m, n_begin, n_end);
    case DType::bf16: return rows<DType::bf16>(x, w, bias, y, m, n_begin, n_end);
    case DType::f16: return rows<DType::f16>(x, w, bias, y, m, n_begin, n_end);
  }
}

}  // namespace actord::cpu
