// AVX512-VNNI instance of the int8-activation quantized GEMM (gemm_quantized_int8.inl): 16 columns per vector.
// Compiled with -mavx512vnni; gemm.cpp calls it only when the CPU has it.
#include <immintrin.h>

#include "executors/cpu/gemm_quantized_int8.inl"

namespace actord::cpu {
namespace {

struct Vnni512 {
  static constexpr int kWidth = 16;
  using I = __m512i;
  using F = __m512;
  static I load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  static I zero_i() { return _mm512_setzero_si512(); }
  static F zero_f() { return _mm512_setzero_ps(); }
  static constexpr int kDot8Offset = 0;
  static I dpbusd(I acc, I u8, I s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }
  static I dot8(I acc, I codes, I x) { return dpbusd(acc, codes, x); }
  static I dot4x2(I acc, I lo, I x_lo, I hi, I x_hi) { return dpbusd(dpbusd(acc, lo, x_lo), hi, x_hi); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I low_nibbles(I w) { return _mm512_and_si512(w, _mm512_set1_epi8(0x0F)); }
  static I high_nibbles(I w) { return _mm512_and_si512(_mm512_srli_epi32(w, 4), _mm512_set1_epi8(0x0F)); }
  static I add_i(I a, I b) { return _mm512_add_epi32(a, b); }
  // maskz forms: GCC 12 warns about the undefined pass-through operand of the plain ones.
  static F cvt(I a) { return _mm512_maskz_cvtepi32_ps(0xFFFF, a); }
  static F load_f16(const unsigned char* p) {
    return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
};

}  // namespace

// 32 registers: 6 rows x 2 of int32 sums and of f32 totals (12 rows when a row is one group).
void gemm_nt_quantized_avx512_vnni(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                   int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  quantized_product::product_any<quantized_int8::Rows, Vnni512, 6, 12>(x, w, bias, y, ff_glu, n_begin, n_end);
}

}  // namespace actord::cpu
