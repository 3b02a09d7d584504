// The AMX product of gemm_amx.inl on the hardware's tiles (compiled with -mamx-tile -mamx-bf16; gemm.cpp calls it only
// where amx_ready()), and the checks that may enable it: CPUID and the kernel's permission for the tile data.
#include <immintrin.h>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "executors/cpu/gemm_amx.inl"

namespace actord::cpu {
namespace {

struct HardwareTiles {
  // The per-block work beside the tiles with AVX-512 (below; AMX ready implies AVX-512 F/BW/VL and F16C).
  static constexpr auto make_b_operands = amx_detail::make_b_operands_avx512;
  static constexpr auto unpack_nibble_chunks = amx_detail::unpack_nibble_chunks_avx512;
  static constexpr auto add_group_sums = amx_detail::add_group_sums_avx512;
  static constexpr auto write_sums = amx_detail::write_sums_avx512;
  // Palette 1: sums in tiles 0..3 (16 rows x 64 bytes), A operands in 4, 5 (16 rows x a_colsb bytes), B operands in
  // 6, 7 (b_rows rows x 64 bytes). The configuration is thread state that other code in the process (a library, a
  // benchmark) may change or release: loaded at every product's start, released at its end (release() also lets
  // the kernel skip the tiles' 8 KB when it switches this thread out).
  static void configure(int a_colsb, int b_rows) {
    alignas(64) unsigned char config[64] = {};
    config[0] = 1;  // palette
    for (int t = 0; t < 8; ++t) {
      const uint16_t colsb = t == 4 || t == 5 ? static_cast<uint16_t>(a_colsb) : uint16_t{amx_detail::kTileBytes};
      std::memcpy(config + 16 + 2 * t, &colsb, 2);
      config[48 + t] = static_cast<unsigned char>(t >= 6 ? b_rows : amx_detail::kTileRows);
    }
    // GCC 12 does not count the 64 bytes as read by the intrinsic and may drop stores to them: make them visible.
    asm volatile("" : : "r"(config) : "memory");
    _tile_loadconfig(config);
  }
  static void release() { _tile_release(); }
  // The tile intrinsics paste their register number into the instruction's text: literal numbers, one per branch.
  template <int T>
  static void zero() {
    if constexpr (T == 0) _tile_zero(0);
    else if constexpr (T == 1) _tile_zero(1);
    else if constexpr (T == 2) _tile_zero(2);
    else if constexpr (T == 3) _tile_zero(3);
    else static_assert(T < 4, "sums live in tiles 0..3");
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    if constexpr (T == 4) _tile_loadd(4, p, stride);
    else if constexpr (T == 5) _tile_loadd(5, p, stride);
    else if constexpr (T == 6) _tile_loadd(6, p, stride);
    else if constexpr (T == 7) _tile_loadd(7, p, stride);
    else static_assert(T >= 4, "operands live in tiles 4..7");
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    if constexpr (T == 0) _tile_stored(0, p, stride);
    else if constexpr (T == 1) _tile_stored(1, p, stride);
    else if constexpr (T == 2) _tile_stored(2, p, stride);
    else if constexpr (T == 3) _tile_stored(3, p, stride);
    else static_assert(T < 4, "sums live in tiles 0..3");
  }
  template <int C, int A, int B>
  static void dot() {
    if constexpr (C == 0 && A == 4 && B == 6) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == 1 && A == 4 && B == 7) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == 2 && A == 5 && B == 6) _tile_dpbf16ps(2, 5, 6);
    else if constexpr (C == 3 && A == 5 && B == 7) _tile_dpbf16ps(3, 5, 7);
    else static_assert(C < 0, "the four products of gemm_amx.inl");
  }
  template <int C, int A, int B>
  static void dot_s8u8() {
    if constexpr (C == 0 && A == 4 && B == 6) _tile_dpbsud(0, 4, 6);
    else if constexpr (C == 1 && A == 4 && B == 7) _tile_dpbsud(1, 4, 7);
    else if constexpr (C == 2 && A == 5 && B == 6) _tile_dpbsud(2, 5, 6);
    else if constexpr (C == 3 && A == 5 && B == 7) _tile_dpbsud(3, 5, 7);
    else static_assert(C < 0, "the four products of gemm_amx.inl");
  }
};

}  // namespace

// Target attributes rather than file flags: the inline helpers this file shares with others stay baseline code.
namespace amx_detail {

#define ACTORD_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

ACTORD_AVX512 void make_b_operands_avx512(const unsigned char* block, int64_t k, int64_t p_begin, int64_t p_end,
                                          uint32_t* lo, uint32_t* hi) {
  const auto* words = reinterpret_cast<const uint32_t*>(block);  // [k][16]
  const int64_t pairs = std::min(p_end, (k + 1) / 2);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t p = p_begin; p < pairs; ++p) {
    const __m512i w0 = _mm512_loadu_si512(words + 2 * p * 16);
    const __m512i w1 = 2 * p + 1 < k ? _mm512_loadu_si512(words + (2 * p + 1) * 16) : _mm512_setzero_si512();
    // lo = (w0 >> 16) | (w1 & 0xFFFF0000), hi = (w0 & 0xFFFF) | (w1 << 16)
    _mm512_storeu_si512(lo + p * 16, _mm512_or_si512(_mm512_srli_epi32(w0, 16), _mm512_and_si512(w1, high)));
    _mm512_storeu_si512(hi + p * 16, _mm512_or_si512(_mm512_andnot_si512(high, w0), _mm512_slli_epi32(w1, 16)));
  }
  for (int64_t p = std::max(p_begin, pairs); p < p_end; ++p) {
    _mm512_storeu_si512(lo + p * 16, _mm512_setzero_si512());
    _mm512_storeu_si512(hi + p * 16, _mm512_setzero_si512());
  }
}

ACTORD_AVX512 void unpack_nibble_chunks_avx512(const unsigned char* codes, int64_t chunks, unsigned char* out) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int64_t j = 0; j < chunks; ++j) {
    for (int half = 0; half < 2; ++half) {
      const __m512i v = _mm512_loadu_si512(codes + 128 * j + 64 * half);
      _mm512_storeu_si512(out + 256 * j + 64 * half, _mm512_and_si512(v, nibble));
      _mm512_storeu_si512(out + 256 * j + 128 + 64 * half, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
    }
  }
}

ACTORD_AVX512 void add_group_sums_avx512(const int32_t (*sums)[kBlockCols], int rows, const uint16_t* scales,
                                         const uint16_t* offsets, const int32_t* code_sums, int64_t code_sums_stride,
                                         int zero, float (*total)[kBlockCols]) {
  const __m512 s0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
  const __m512 s1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 16)));
  if (offsets) {
    const __m512 o0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets)));
    const __m512 o1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets + 16)));
    for (int r = 0; r < rows; ++r) {
      const int32_t q = code_sums[r * code_sums_stride];
      const __m512i z = _mm512_set1_epi32(zero * q);
      const __m512 fq = _mm512_set1_ps(static_cast<float>(q));
      __m512 t0 = _mm512_fmadd_ps(s0, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(sums[r]), z)),
                                  _mm512_load_ps(total[r]));
      __m512 t1 = _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(sums[r] + 16), z)),
                                  _mm512_load_ps(total[r] + 16));
      _mm512_store_ps(total[r], _mm512_fmadd_ps(o0, fq, t0));
      _mm512_store_ps(total[r] + 16, _mm512_fmadd_ps(o1, fq, t1));
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const __m512i z = _mm512_set1_epi32(zero * code_sums[r * code_sums_stride]);
    _mm512_store_ps(total[r], _mm512_fmadd_ps(s0, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(sums[r]), z)),
                                              _mm512_load_ps(total[r])));
    _mm512_store_ps(total[r] + 16,
                    _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(sums[r] + 16), z)),
                                    _mm512_load_ps(total[r] + 16)));
  }
}

// The scalar twin inlined here and vectorised for AVX-512 (silu is branch-free); no contraction into FMAs, so that
// the results are the twin's bits.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
__attribute__((target("avx512f,avx512bw,avx512vl,prefer-vector-width=512"))) void write_sums_avx512(
    const float (*sums)[kBlockCols], int rows, int outs, bool glu, const float* bias, float* y, int64_t ldy) {
  write_sums(sums, rows, outs, glu, bias, y, ldy);
}
#pragma GCC pop_options

#undef ACTORD_AVX512

}  // namespace amx_detail

// CPUID.(7, 0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE; then Linux's permission for XTILEDATA (state component 18),
// asked once per process (a thread using the tiles without it gets SIGILL).
bool amx_permitted(const char** why) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 22)) || !(edx & (1u << 24))) {
    *why = "this CPU has no AMX-TILE / AMX-BF16";
    return false;
  }
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    *why = "the kernel refused the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return false;
  }
  return true;
}

void gemm_nt_blocked_amx(const AmxRows& x, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                         int64_t n_end) {
  amx_detail::product<HardwareTiles, false>(x, w, bias, y, w.rows, w.rows, n_begin, n_end);
}

void gemm_nt_glu_amx(const AmxRows& x, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin, int64_t n_end) {
  amx_detail::product<HardwareTiles, true>(x, w, nullptr, y, ff, ff, n_begin, n_end);
}

// CPUID.(7, 0):EDX bit 25: AMX-INT8.
bool cpu_has_amx_int8() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 25));
}

void gemm_nt_quantized_amx(const AmxQuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
                           int64_t n_begin, int64_t n_end) {
  if (ff_glu > 0) amx_detail::product_int8<HardwareTiles, true>(x, w, nullptr, y, ff_glu, ff_glu, n_begin, n_end);
  else amx_detail::product_int8<HardwareTiles, false>(x, w, bias, y, w.rows, w.rows, n_begin, n_end);
}

}  // namespace actord::cpu
