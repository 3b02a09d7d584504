// 8-wide AVX2 + FMA + F16C instances of the GEMM micro-kernels (gemm_tiles.inl, gemm_packed.inl, gemm_blocked.inl,
// gemm_quantized_int8.inl without VNNI). Compiled with -mavx2 -mfma -mf16c; gemm.cpp calls
// them only when the CPU has those features.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "executors/cpu/gemm_blocked.inl"
#include "executors/cpu/gemm_packed.inl"
#include "executors/cpu/gemm_quantized_int8.inl"
#include "executors/cpu/int8_vectors.inl"

namespace actord::cpu {
namespace {

struct Avx2 {
  static constexpr int kWidth = 8;
  using V = __m256;
  template <DType D>
  static V load(const unsigned char* p) {
    if constexpr (D == DType::f32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (D == DType::bf16) {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    } else {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
  }
  // Half `half` of one input feature of a weight block (blocked_weights.hpp): columns [8 half, +8) and [16 + 8 half, +8).
  template <DType D>
  static void load_block_cols(const unsigned char* p, int half, V& first, V& second) {
    if constexpr (D == DType::bf16) {
      const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + half * 32));
      first = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
      second = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    } else {
      constexpr int esize = D == DType::f32 ? 4 : 2;
      first = load<D>(p + half * 8 * esize);
      second = load<D>(p + (16 + half * 8) * esize);
    }
  }
  static V load_x(const float* p) { return _mm256_loadu_ps(p); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V zero() { return _mm256_setzero_ps(); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

// The int8-activation quantized product's vector type without VNNI (AVX2 CPUs such as AMD Zen 2/3, Intel up to
// Ice Lake client): a word's four byte products summed by vpmaddubsw (unsigned x signed bytes, adjacent pairs into
// saturating int16) and vpmaddwd (pairs of int16 into int32). A 4-bit code times an x code is at most 15 x 127, so
// pair sums (and the sum of both nibble planes' pairs) stay far inside int16; 8-bit codes are centred first (code
// - 128 in -128..127, its magnitude times x with the code's sign: at most 2 x 128 x 127 = 32,512 a pair).
struct Avx2Int8 : Int8Vectors256 {
  static constexpr int kDot8Offset = 128;
  static I dot8(I acc, I codes, I x) {
    const I centred = _mm256_xor_si256(codes, _mm256_set1_epi8(static_cast<char>(0x80)));
    const I pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(centred), _mm256_sign_epi8(x, centred));
    return _mm256_add_epi32(acc, pairs_to_words(pairs));
  }
  static I dot4x2(I acc, I lo, I x_lo, I hi, I x_hi) {
    const I pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x_lo), _mm256_maddubs_epi16(hi, x_hi));
    return _mm256_add_epi32(acc, pairs_to_words(pairs));
  }
};

}  // namespace

// 16 registers: 1x4 tiles for decode, 4x3 (12 accumulators) otherwise.
void gemm_nt_rows_avx2(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                       int64_t n_end) {
  tiles::gemm_rows<Avx2, 4, 3>(x, w, bias, y, m, n_begin, n_end);
}

// 16 registers: blocks of 16 rows x 6 weight rows (12 accumulators), or 8 x 12 for at most 8 rows.
int packed_block_rows_avx2(int m) { return m <= 8 ? 8 : 16; }

void gemm_nt_packed_avx2(const PackedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                         int64_t n_end) {
  if (x.block_rows == 8) return packed::rows<Avx2, 1, 12>(x, w, bias, y, n_begin, n_end);
  packed::rows<Avx2, 2, 6>(x, w, bias, y, n_begin, n_end);
}

// 16 registers: 6 rows x 2 vectors (12 accumulators) per half block, its two weight vectors and a broadcast.
void gemm_nt_blocked_avx2(const float* x, int m, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                          int64_t n_end) {
  blocked::product_any<Avx2, 6>(x, m, w, bias, y, n_begin, n_end);
}

void gemm_nt_glu_avx2(const float* x, int m, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                      int64_t n_end) {
  blocked::glu_any<Avx2, 6>(x, m, w, ff, y, n_begin, n_end);
}

void convert_rows_to_f32_avx2(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out) {
  tiles::convert_rows<Avx2>(w, row_begin, rows, out);
}

// 16 registers: as the AVX-VNNI instance, 2 rows x 2 of int32 sums and of f32 totals per half block.
void gemm_nt_quantized_avx2_int8(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                 int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  quantized_product::product_any<quantized_int8::Rows, Avx2Int8, 2, 4>(x, w, bias, y, ff_glu, n_begin, n_end);
}

void quantize_rows_int8_avx2(const float* x, int m, int64_t k, int64_t ld, int8_t* codes, float* scales) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int i = 0; i < m; ++i) {
    const float* row = x + i * k;
    __m256 amax = _mm256_setzero_ps();
    int64_t t = 0;
    for (; t + 8 <= k; t += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(row + t)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, amax);
    float peak = 0.0f;
    for (float v : lanes) peak = std::max(peak, v);
    for (int64_t u = t; u < k; ++u) peak = std::max(peak, std::fabs(row[u]));
    scales[i] = peak / 127.0f;
    const float inv = peak > 0.0f ? 127.0f / peak : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    int8_t* out = codes + i * ld;
    for (t = 0; t + 8 <= k; t += 8) {
      // cvtps rounds to nearest even (the default MXCSR mode), as nearbyint does; |code| <= 127 needs no saturation.
      alignas(32) int32_t q[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + t), vinv)));
      for (int l = 0; l < 8; ++l) out[t + l] = static_cast<int8_t>(q[l]);
    }
    for (; t < k; ++t) out[t] = static_cast<int8_t>(std::nearbyint(row[t] * inv));
    std::fill(out + k, out + ld, int8_t{0});
  }
}

}  // namespace actord::cpu
