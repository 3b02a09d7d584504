// bf16 K/V rows read in pairs, for attention_kernels.inl (included by it, inside its instance's namespace, after its
// vector type and before the kernels, which take this file's Bf16Pairs as their row reader). A bf16 element is the high
// half of an f32, so one vector load of 2W elements gives W f32 values of the even elements (each 32-bit lane shifted
// left by 16) and W of the odd ones (the lane's low half masked off): two ALU operations per 2W elements, where
// widening each half (vpmovzxwd, then a shift) costs three. The query a key is scored against and the accumulator a
// value is added into are kept in the same pair order (in each run of kPairElems elements, the even ones first, then
// the odd ones): q is reordered once per head, the accumulator is written back in natural order at the end. A value
// element's sum is the same sequence of FMAs as in natural order; a score's lanes sum the pair (2i, 2i + 1) of every
// run instead of (i, i + W), and every kernel of an instance adds in that order (decode and prefill tiles alike), so
// that a query's bits do not depend on its batch. Used for bf16 caches whose head_dim is a multiple of kPairElems
// (pairs_split); other dtypes and head_dims keep the natural-order kernels.
#pragma once

#if defined(__AVX512F__)
constexpr int kPairElems = 32;  // bf16 elements per 512-bit load
#elif defined(__AVX2__)
constexpr int kPairElems = 16;  // per 256-bit load
#else
constexpr int kPairElems = 0;  // the portable instance reads rows element by element
#endif

template <DType D>
inline bool pairs_split(int hd) {
  if constexpr (D != DType::bf16 || kPairElems == 0) {
    return false;
  } else {
    return hd % (kPairElems > 0 ? kPairElems : 1) == 0;
  }
}

// out[0, hd) = in[0, hd) in pair order (hd a multiple of kPairElems).
inline void to_pair_order(const float* in, int hd, float* out) {
  if constexpr (kPairElems > 0) {
    constexpr int half = kPairElems / 2;
    for (int c = 0; c < hd; c += kPairElems) {
      for (int i = 0; i < half; ++i) {
        out[c + i] = in[c + 2 * i];
        out[c + half + i] = in[c + 2 * i + 1];
      }
    }
  }
}

// out[0, hd) = in[0, hd) (pair order) back in natural order, each times `scale`.
inline void from_pair_order(const float* in, int hd, float scale, float* out) {
  if constexpr (kPairElems > 0) {
    constexpr int half = kPairElems / 2;
    for (int c = 0; c < hd; c += kPairElems) {
      for (int i = 0; i < half; ++i) {
        out[c + 2 * i] = in[c + i] * scale;
        out[c + 2 * i + 1] = in[c + half + i] * scale;
      }
    }
  }
}

#if defined(__AVX512F__)
// The row reader (attention_impl.inl's kernels take one) for bf16 rows in pairs: 32 elements per load, the even ones
// in the first vector, the odd ones in the second.
struct Bf16Pairs {
  using Elem = uint16_t;
  static constexpr int kElems = kPairElems, kVecs = 2;
  [[gnu::always_inline]] static void load(const uint16_t* p, Vec* v) {
    const __m512i x = _mm512_loadu_si512(p);
    v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    v[1] = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};
#elif defined(__AVX2__)
// The same with 16 elements per load.
struct Bf16Pairs {
  using Elem = uint16_t;
  static constexpr int kElems = kPairElems, kVecs = 2;
  [[gnu::always_inline]] static void load(const uint16_t* p, Vec* v) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    v[1] = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};
#else
// The portable instance never splits (pairs_split is false there): named for attend's discarded branches only.
struct Bf16Pairs {
  using Elem = uint16_t;
};
template <class R>
inline void score_key_passes(const float* const*, int, const typename R::Elem*, int, int, float, float* const*) {}
template <class R>
inline void add_values_in(const float* const*, const int*, int, const typename R::Elem*, int, float* const*) {}
#endif
