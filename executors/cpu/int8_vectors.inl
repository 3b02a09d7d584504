// What the int8-activation kernels' vector types (gemm_quantized_int8.inl's `Vec`) share apart from their dot
// products: loads, nibbles, conversions and f32 arithmetic, 8 columns (AVX2) or 16 (AVX-512 F/BW) wide. Each vector
// type derives from one and adds kDot8Offset, dot8 and dot4x2 (VNNI, or vpmaddubsw without it). Internal to each
// file that includes it (an anonymous namespace), and each width only where the file's flags allow it: the same
// inline function compiled with AVX-512 flags in one file must not be the copy an AVX2 file calls.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace actord::cpu {
namespace {

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
struct Int8Vectors256 {
  static constexpr int kWidth = 8;
  using I = __m256i;
  using F = __m256;
  static I load(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(unsigned char* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static I add_bytes(I a, char b) { return _mm256_add_epi8(a, _mm256_set1_epi8(b)); }
  static I zero_i() { return _mm256_setzero_si256(); }
  static F zero_f() { return _mm256_setzero_ps(); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I low_nibbles(I w) { return _mm256_and_si256(w, _mm256_set1_epi8(0x0F)); }
  static I high_nibbles(I w) { return _mm256_and_si256(_mm256_srli_epi32(w, 4), _mm256_set1_epi8(0x0F)); }
  template <int kShift>
  static I with_crumbs(I nibbles, I h) {
    const I moved = kShift > 0 ? _mm256_slli_epi32(h, kShift) : kShift < 0 ? _mm256_srli_epi32(h, -kShift) : h;
    return _mm256_or_si256(nibbles, _mm256_and_si256(moved, _mm256_set1_epi8(0x30)));
  }
  static I add_i(I a, I b) { return _mm256_add_epi32(a, b); }
  // Adjacent int16 pairs summed into int32 (vpmaddwd by ones).
  static I pairs_to_words(I pairs) { return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F load_f16(const unsigned char* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
};
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
struct Int8Vectors512 {
  static constexpr int kWidth = 16;
  using I = __m512i;
  using F = __m512;
  static I load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  static void store(unsigned char* p, I v) { _mm512_storeu_si512(p, v); }
  static I add_bytes(I a, char b) { return _mm512_add_epi8(a, _mm512_set1_epi8(b)); }
  static I zero_i() { return _mm512_setzero_si512(); }
  static F zero_f() { return _mm512_setzero_ps(); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I low_nibbles(I w) { return _mm512_and_si512(w, _mm512_set1_epi8(0x0F)); }
  static I high_nibbles(I w) { return _mm512_and_si512(_mm512_srli_epi32(w, 4), _mm512_set1_epi8(0x0F)); }
  template <int kShift>
  static I with_crumbs(I nibbles, I h) {
    const I moved = kShift > 0 ? _mm512_slli_epi32(h, kShift) : kShift < 0 ? _mm512_srli_epi32(h, -kShift) : h;
    // Per bit: the mask's bits (4-5) from `moved`, the others from `nibbles` (vpternlogd, C ? B : A).
    return _mm512_ternarylogic_epi32(nibbles, moved, _mm512_set1_epi8(0x30), 0xD8);
  }
  static I add_i(I a, I b) { return _mm512_add_epi32(a, b); }
  static I pairs_to_words(I pairs) { return _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)); }
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
#endif

}  // namespace
}  // namespace actord::cpu
