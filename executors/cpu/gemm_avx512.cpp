// 16-wide AVX-512 (F, BW) instances of the GEMM micro-kernels (gemm_tiles.inl, gemm_packed.inl, gemm_blocked.inl,
// gemm_quantized_int8.inl without VNNI). Compiled with -mavx512f -mavx512bw -mfma -mf16c;
// gemm.cpp calls them only when the CPU has those features.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "executors/cpu/gemm_blocked.inl"
#include "executors/cpu/gemm_packed.inl"
#include "executors/cpu/gemm_quantized_int8.inl"
#include "executors/cpu/int8_vectors.inl"

namespace actord::cpu {
namespace {

struct Avx512 {
  static constexpr int kWidth = 16;
  using V = __m512;
  template <DType D>
  static V load(const unsigned char* p) {
    if constexpr (D == DType::f32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (D == DType::bf16) {
      const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
  }
  // One input feature of a weight block (blocked_weights.hpp): all 32 columns, so `half` is always 0.
  template <DType D>
  static void load_block_cols(const unsigned char* p, int, V& first, V& second) {
    if constexpr (D == DType::bf16) {
      const __m512i pairs = _mm512_loadu_si512(p);
      first = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
      second = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
    } else {
      first = load<D>(p);
      second = load<D>(p + 16 * (D == DType::f32 ? 4 : 2));
    }
  }
  static V load_x(const float* p) { return _mm512_loadu_ps(p); }
  static V broadcast(const float* p) { return _mm512_broadcastss_ps(_mm_load_ss(p)); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V zero() { return _mm512_setzero_ps(); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
};

// The int8-activation quantized product's vector type on AVX-512 without VNNI (Intel Skylake-SP): AVX2's Avx2Int8
// (gemm_avx2.cpp) 16 columns wide; AVX512-BW has no vpsignb, so x is negated under the mask of negative codes.
struct Avx512Int8 : Int8Vectors512 {
  static constexpr int kDot8Offset = 128;
  static I dot8(I acc, I codes, I x) {
    const I centred = _mm512_xor_si512(codes, _mm512_set1_epi8(static_cast<char>(0x80)));
    const I signed_x = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(centred), _mm512_setzero_si512(), x);
    return _mm512_add_epi32(acc, pairs_to_words(_mm512_maddubs_epi16(_mm512_abs_epi8(centred), signed_x)));
  }
  static I dot4x2(I acc, I lo, I x_lo, I hi, I x_hi) {
    const I pairs = _mm512_add_epi16(_mm512_maddubs_epi16(lo, x_lo), _mm512_maddubs_epi16(hi, x_hi));
    return _mm512_add_epi32(acc, pairs_to_words(pairs));
  }
};

}  // namespace

// 32 registers: 1x6 tiles for decode, 4x6 (24 accumulators) otherwise.
void gemm_nt_rows_avx512(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                         int64_t n_end) {
  tiles::gemm_rows<Avx512, 6, 6>(x, w, bias, y, m, n_begin, n_end);
}

// 32 registers: blocks of 32 rows x 12 weight rows (24 accumulators), or 16 x 24 for at most 16 rows.
int packed_block_rows_avx512(int m) { return m <= 16 ? 16 : 32; }

void gemm_nt_packed_avx512(const PackedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                         int64_t n_end) {
  if (x.block_rows == 16) return packed::rows<Avx512, 1, 24>(x, w, bias, y, n_begin, n_end);
  packed::rows<Avx512, 2, 12>(x, w, bias, y, n_begin, n_end);
}

float fma_chains(long iterations) {
  __m512 acc[16];
  const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
  for (auto& v : acc) v = _mm512_set1_ps(1.0f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < 16; ++j) sum = _mm512_add_ps(sum, acc[j]);
  return _mm512_reduce_add_ps(sum);
}

// 32 registers: 12 rows x 2 vectors (24 accumulators), the block's two weight vectors and a broadcast.
void gemm_nt_blocked_avx512(const float* x, int m, const WeightMatrix& w, const float* bias, float* y,
                            int64_t n_begin, int64_t n_end) {
  blocked::product_any<Avx512, 12>(x, m, w, bias, y, n_begin, n_end);
}

void gemm_nt_glu_avx512(const float* x, int m, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                      int64_t n_end) {
  blocked::glu_any<Avx512, 12>(x, m, w, ff, y, n_begin, n_end);
}

void convert_rows_to_f32_avx512(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out) {
  tiles::convert_rows<Avx512>(w, row_begin, rows, out);
}

// 32 registers: 4 rows x 2 of int32 sums and of f32 totals beside the centred codes and x (8 when a row is one group).
void gemm_nt_quantized_avx512_int8(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                   int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  quantized_product::product_any<quantized_int8::Rows, Avx512Int8, 4, 8>(x, w, bias, y, ff_glu, n_begin, n_end);
}

void quantize_rows_int8_avx512(const float* x, int m, int64_t k, int64_t ld, int8_t* codes, float* scales) {
  for (int i = 0; i < m; ++i) {
    const float* row = x + i * k;
    __m512 amax = _mm512_setzero_ps();
    int64_t t = 0;
    for (; t + 16 <= k; t += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(row + t)));
    float peak = _mm512_reduce_max_ps(amax);
    for (int64_t u = t; u < k; ++u) peak = std::max(peak, std::fabs(row[u]));
    scales[i] = peak / 127.0f;
    const float inv = peak > 0.0f ? 127.0f / peak : 0.0f;
    const __m512 vinv = _mm512_set1_ps(inv);
    int8_t* out = codes + i * ld;
    for (t = 0; t + 16 <= k; t += 16) {
      // cvtps rounds to nearest even (the default MXCSR mode), as nearbyint does.
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + t), vinv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + t), _mm512_cvtsepi32_epi8(q));
    }
    for (; t < k; ++t) out[t] = static_cast<int8_t>(std::nearbyint(row[t] * inv));
    std::fill(out + k, out + ld, int8_t{0});
  }
}

}  // namespace actord::cpu
