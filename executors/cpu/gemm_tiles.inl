// The register-tiled GEMM micro-kernels, written once over a vector type. Included by gemm_avx2.cpp (8-wide) and
// gemm_avx512.cpp (16-wide), each compiled with its own instruction-set flags; `Vec` provides
//   static constexpr int kWidth;  using V;  template <DType D> static V load(const unsigned char*);
//   static V load_x(const float*);  static V zero();  static V fma(V a, V b, V c);  static float hsum(V);
//   static void store(float*, V);
// A micro-tile computes MR rows of x against NR weight rows, keeping MR*NR accumulators in registers; each weight
// vector is loaded (and converted from bf16/f16) once per tile and used MR times.
#pragma once

#include <algorithm>
#include <cstring>

#include "core/status.hpp"
#include "executors/cpu/gemm.hpp"

namespace actord::cpu::tiles {

constexpr int64_t kPrefetchBytes = 2048;

template <DType D>
inline float load1(const unsigned char* p) {
  float v;
  convert_to_f32(D, p, &v, 1);
  return v;
}

// y[i, j + r] for i < MR, r < NR.
template <class Vec, DType D, int MR, int NR>
void tile(const float* x, int64_t k, const WeightMatrix& w, int64_t j, const float* bias, float* y, int64_t ldy) {
  using V = typename Vec::V;
  constexpr int64_t esize = D == DType::f32 ? 4 : 2;
  constexpr int64_t W = Vec::kWidth;
  const unsigned char* wr[NR];
  for (int r = 0; r < NR; ++r) wr[r] = w.row(j + r);
  V acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = Vec::zero();
  int64_t t = 0;
  for (; t + W <= k; t += W) {
    V wv[NR];
    if constexpr (MR <= 2) {
      // Decode reads each weight once, from DRAM: ask for it ahead of time, a cache line per row every 64 bytes.
      if ((t * esize) % 64 == 0) {
        for (int r = 0; r < NR; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(wr[r] + t * esize) + kPrefetchBytes, _MM_HINT_T0);
        }
      }
    }
    for (int r = 0; r < NR; ++r) wv[r] = Vec::template load<D>(wr[r] + t * esize);
    for (int i = 0; i < MR; ++i) {
      const V xv = Vec::load_x(x + i * k + t);
      for (int r = 0; r < NR; ++r) acc[i][r] = Vec::fma(xv, wv[r], acc[i][r]);
    }
  }
  float out[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) out[i][r] = Vec::hsum(acc[i][r]);
  for (; t < k; ++t) {
    for (int r = 0; r < NR; ++r) {
      const float wf = load1<D>(wr[r] + t * esize);
      for (int i = 0; i < MR; ++i) out[i][r] += x[i * k + t] * wf;
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) y[i * ldy + j + r] = out[i][r] + (bias ? bias[j + r] : 0.0f);
}

template <class Vec, DType D, int NR>
void tile_rows(const float* x, int mr, int64_t k, const WeightMatrix& w, int64_t j, const float* bias, float* y,
               int64_t ldy) {
  switch (mr) {
    case 1: return tile<Vec, D, 1, NR>(x, k, w, j, bias, y, ldy);
    case 2: return tile<Vec, D, 2, NR>(x, k, w, j, bias, y, ldy);
    case 3: return tile<Vec, D, 3, NR>(x, k, w, j, bias, y, ldy);
    default: return tile<Vec, D, 4, NR>(x, k, w, j, bias, y, ldy);
  }
}

// NR_MANY weight rows per tile when x has few rows (decode: more loads in flight), NR_FEW otherwise (what the
// register file holds next to 4 x rows).
template <class Vec, DType D, int NR_MANY, int NR_FEW>
void rows(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin, int64_t n_end) {
  static_assert(NR_MANY >= 1 && NR_MANY <= 6 && NR_FEW >= 1 && NR_FEW <= 6, "tile_rows covers 1..6 weight rows");
  const int64_t k = w.cols, n = w.rows;
  constexpr int kRowBlock = 64;  // rows of x kept hot in L2 while the weight rows stream past
  const int nr = m < 4 ? NR_MANY : NR_FEW;
  for (int i0 = 0; i0 < m; i0 += kRowBlock) {
    const int i1 = std::min(m, i0 + kRowBlock);
    for (int64_t j = n_begin; j < n_end; j += nr) {
      const int64_t cols = std::min<int64_t>(nr, n_end - j);
      for (int i = i0; i < i1; i += 4) {
        const int mr = std::min(4, i1 - i);
        const float* xi = x + static_cast<int64_t>(i) * k;
        float* yi = y + static_cast<int64_t>(i) * n;
        switch (cols) {
          case 1: tile_rows<Vec, D, 1>(xi, mr, k, w, j, bias, yi, n); break;
          case 2: tile_rows<Vec, D, 2>(xi, mr, k, w, j, bias, yi, n); break;
          case 3: tile_rows<Vec, D, 3>(xi, mr, k, w, j, bias, yi, n); break;
          case 4: tile_rows<Vec, D, 4>(xi, mr, k, w, j, bias, yi, n); break;
          case 5: tile_rows<Vec, D, 5>(xi, mr, k, w, j, bias, yi, n); break;
          default: tile_rows<Vec, D, 6>(xi, mr, k, w, j, bias, yi, n); break;
        }
      }
    }
  }
}

template <class Vec, int NR_MANY, int NR_FEW>
void gemm_rows(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
               int64_t n_end) {
  switch (w.dtype) {
    case DType::f32: return rows<Vec, DType::f32, NR_MANY, NR_FEW>(x, w, bias, y, m, n_begin, n_end);
    case DType::bf16: return rows<Vec, DType::bf16, NR_MANY, NR_FEW>(x, w, bias, y, m, n_begin, n_end);
    case DType::f16: return rows<Vec, DType::f16, NR_MANY, NR_FEW>(x, w, bias, y, m, n_begin, n_end);
    case DType::i8: break;  // no weight is i8 (quantized ones are QuantizedMatrix codes)
  }
  ACTORD_CHECK_MSG(false, "an i8 WeightMatrix");
}

// dst[c] = src[c] as f32 for c < count; src holds elements of dtype.
template <class Vec>
void convert_span(DType dtype, const unsigned char* src, float* dst, int64_t count) {
  constexpr int64_t W = Vec::kWidth;
  int64_t c = 0;
  if (dtype == DType::bf16) {
    for (; c + W <= count; c += W) Vec::store(dst + c, Vec::template load<DType::bf16>(src + c * 2));
  } else if (dtype == DType::f16) {
    for (; c + W <= count; c += W) Vec::store(dst + c, Vec::template load<DType::f16>(src + c * 2));
  }
  if (c < count) convert_to_f32(dtype, src + c * dtype_size(dtype), dst + c, size_t(count - c));
}

template <class Vec>
void convert_rows(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out) {
  for (int64_t r = 0; r < rows; ++r) convert_span<Vec>(w.dtype, w.row(row_begin + r), out + r * w.cols, w.cols);
}

}  // namespace actord::cpu::tiles
