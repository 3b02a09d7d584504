// bf16 K/V rows read in pairs, for attention_impl.inl (included by it, inside its instance's namespace, after the
// butterflies it shares). A bf16 element is the high half of an f32, so one vector load of 2W elements gives W f32
// values of the even elements (each 32-bit lane shifted left by 16) and W of the odd ones (the lane's low half masked
// off): two ALU operations per 2W elements, where widening each half (vpmovzxwd, then a shift) costs three. The query
// a key is scored against and the accumulator a value is added into are kept in the same pair order (in each run of
// kPairElems elements, the even ones first, then the odd ones): q is reordered once per head, the accumulator is
// written back in natural order at the end. A value element's sum is the same sequence of FMAs as in natural order;
// a score's lanes sum the pair (2i, 2i + 1) of every run instead of (i, i + W), and every kernel of an instance adds
// in that order (decode and prefill tiles alike), so that a query's bits do not depend on its batch.
// Used for bf16 caches whose head_dim is a multiple of kPairElems (pairs_split); other dtypes and head_dims keep the
// natural-order kernels.
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
// 32 bf16 elements at p: the even ones and the odd ones as f32.
inline void load_pairs(const uint16_t* p, __m512& even, __m512& odd) {
  const __m512i v = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// One key's 16 partial sums of q . k (qs: q in pair order).
template <int HD>
[[gnu::always_inline]] inline __m512 key_dot_pairs(const float* qs, const uint16_t* k, int hd) {
  if constexpr (HD > 0) hd = HD;
  __m512 even, odd;
  load_pairs(k, even, odd);
  __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qs), even);
  a = _mm512_fmadd_ps(_mm512_loadu_ps(qs + 16), odd, a);
  for (int c = 32; c < hd; c += 32) {
    load_pairs(k + c, even, odd);
    a = _mm512_fmadd_ps(_mm512_loadu_ps(qs + c), even, a);
    a = _mm512_fmadd_ps(_mm512_loadu_ps(qs + c + 16), odd, a);
  }
  return a;
}

// scores[j] = q . k_j * scale for 16 keys: score_16_keys's butterfly over key_dot_pairs.
template <int HD>
[[gnu::always_inline]] inline void score_16_keys_pairs(const float* qs, const uint16_t* keys, int hd, float scale,
                                                       float* scores) {
  if constexpr (HD > 0) hd = HD;
  __m512 part[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) part[(j % 4) * 4 + j / 4] = key_dot_pairs<HD>(qs, keys + static_cast<int64_t>(j) * hd, hd);
  __m512 first[8], second[4];
  for (int i = 0; i < 8; ++i) first[i] = fold_256(part[2 * i], part[2 * i + 1]);
  for (int i = 0; i < 4; ++i) second[i] = fold_128(first[2 * i], first[2 * i + 1]);
  _mm512_storeu_ps(scores, _mm512_mul_ps(sum_quads_16(second), _mm512_set1_ps(scale)));
}

// The same for Q queries at once (score_16_keys_multi's order of keys and folds), each key's pairs loaded once for
// all of them: a query's scores are the bits score_16_keys_pairs gives it.
template <int HD, int Q>
[[gnu::always_inline]] inline void score_16_keys_pairs_multi(const float* const* qs, const uint16_t* keys, int hd,
                                                             float scale, float* const* scores) {
  if constexpr (HD > 0) hd = HD;
  __m512 second[Q][4], first[Q], part[Q];
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    const uint16_t* k = keys + static_cast<int64_t>((m % 4) * 4 + m / 4) * hd;
    __m512 a[Q], even, odd;
    load_pairs(k, even, odd);
    for (int t = 0; t < Q; ++t) {
      a[t] = _mm512_mul_ps(_mm512_loadu_ps(qs[t]), even);
      a[t] = _mm512_fmadd_ps(_mm512_loadu_ps(qs[t] + 16), odd, a[t]);
    }
    for (int c = 32; c < hd; c += 32) {
      load_pairs(k + c, even, odd);
      for (int t = 0; t < Q; ++t) {
        a[t] = _mm512_fmadd_ps(_mm512_loadu_ps(qs[t] + c), even, a[t]);
        a[t] = _mm512_fmadd_ps(_mm512_loadu_ps(qs[t] + c + 16), odd, a[t]);
      }
    }
    for (int t = 0; t < Q; ++t) {
      if (m % 2 == 0) {
        part[t] = a[t];
        continue;
      }
      const __m512 level1 = fold_256(part[t], a[t]);
      if (m % 4 == 1) {
        first[t] = level1;
        continue;
      }
      second[t][m / 4] = fold_128(first[t], level1);
    }
  }
  for (int t = 0; t < Q; ++t)
    _mm512_storeu_ps(scores[t], _mm512_mul_ps(sum_quads_16(second[t]), _mm512_set1_ps(scale)));
}

// Scores of 16-key runs of n keys (n / 16 * 16 of them) for up to kMaxTile queries, in kernels of four, two or one.
template <int HD>
inline void score_keys_pairs_tile(const float* const* qs, int nq, const uint16_t* keys, int n, int hd, float scale,
                                  float* const* scores) {
  for (int j = 0; j + 16 <= n; j += 16) {
    const uint16_t* k = keys + static_cast<int64_t>(j) * hd;
    float* at[4];
    int t = 0;
    for (; t + 4 <= nq; t += 4) {
      for (int u = 0; u < 4; ++u) at[u] = scores[t + u] + j;
      score_16_keys_pairs_multi<HD, 4>(qs + t, k, hd, scale, at);
    }
    for (; t + 2 <= nq; t += 2) {
      for (int u = 0; u < 2; ++u) at[u] = scores[t + u] + j;
      score_16_keys_pairs_multi<HD, 2>(qs + t, k, hd, scale, at);
    }
    for (; t < nq; ++t) score_16_keys_pairs<HD>(qs[t], k, hd, scale, scores[t] + j);
  }
}

// acc[t] (pair order, RUNS runs of 32 elements) += sum_j w[t][j] * v_j over query t's n[t] keys for Q queries, each
// value run loaded once for all of them (accumulate_chunks_multi's order).
template <int RUNS, int Q>
[[gnu::always_inline]] inline void accumulate_pairs_multi(const float* const* w, const int* n, const uint16_t* values,
                                                          int64_t stride, float* const* acc) {
  __m512 a[Q][2 * RUNS];
  int n_min = n[0], n_max = n[0];
  for (int t = 0; t < Q; ++t) {
    n_min = std::min(n_min, n[t]);
    n_max = std::max(n_max, n[t]);
    for (int c = 0; c < 2 * RUNS; ++c) a[t][c] = _mm512_loadu_ps(acc[t] + 16 * c);
  }
  int j = 0;
  for (; j < n_min; ++j) {  // keys every query sees
    const uint16_t* v = values + static_cast<int64_t>(j) * stride;
    __m512 wj[Q];
    for (int t = 0; t < Q; ++t) wj[t] = _mm512_set1_ps(w[t][j]);
    for (int c = 0; c < RUNS; ++c) {
      __m512 even, odd;
      load_pairs(v + 32 * c, even, odd);
      for (int t = 0; t < Q; ++t) {
        a[t][2 * c] = _mm512_fmadd_ps(wj[t], even, a[t][2 * c]);
        a[t][2 * c + 1] = _mm512_fmadd_ps(wj[t], odd, a[t][2 * c + 1]);
      }
    }
  }
  for (; j < n_max; ++j) {  // keys only the later queries see
    const uint16_t* v = values + static_cast<int64_t>(j) * stride;
    for (int c = 0; c < RUNS; ++c) {
      __m512 even, odd;
      load_pairs(v + 32 * c, even, odd);
      for (int t = 0; t < Q; ++t) {
        if (j >= n[t]) continue;
        const __m512 wj = _mm512_set1_ps(w[t][j]);
        a[t][2 * c] = _mm512_fmadd_ps(wj, even, a[t][2 * c]);
        a[t][2 * c + 1] = _mm512_fmadd_ps(wj, odd, a[t][2 * c + 1]);
      }
    }
  }
  for (int t = 0; t < Q; ++t)
    for (int c = 0; c < 2 * RUNS; ++c) _mm512_storeu_ps(acc[t] + 16 * c, a[t][c]);
}

// Up to kMaxTile queries' values over RUNS runs of 32 elements (pair order), in kernels of four, two or one queries
// (accumulate_chunks_tile's grouping).
template <int RUNS>
inline void accumulate_pairs_tile(const float* const* w, const int* n, int nq, const uint16_t* values, int64_t stride,
                                  float* const* acc) {
  int t = 0;
  for (; t + 4 <= nq; t += 4) accumulate_pairs_multi<RUNS, 4>(w + t, n + t, values, stride, acc + t);
  for (; t + 2 <= nq; t += 2) accumulate_pairs_multi<RUNS, 2>(w + t, n + t, values, stride, acc + t);
  for (; t < nq; ++t) accumulate_pairs_multi<RUNS, 1>(w + t, n + t, values, stride, acc + t);
}

// Up to kMaxTile queries' acc (pair order) += their weighted values: 64 elements (two runs) at a time in registers.
inline void add_values_pairs_tile(const float* const* w, const int* n, int nq, const uint16_t* values, int hd,
                                  float* const* acc) {
  float* at[kMaxTile];
  for (int c0 = 0; c0 < hd; c0 += 64) {
    for (int t = 0; t < nq; ++t) at[t] = acc[t] + c0;
    if (hd - c0 >= 64) accumulate_pairs_tile<2>(w, n, nq, values + c0, hd, at);
    else accumulate_pairs_tile<1>(w, n, nq, values + c0, hd, at);
  }
}

// One query's: the tile's kernels for one.
inline void accumulate_values_pairs(const float* w, const uint16_t* values, int n, int hd, float* acc) {
  add_values_pairs_tile(&w, &n, 1, values, hd, &acc);
}

// scores[j] for keys [0, n / 16 * 16) of a block, one query.
inline void score_keys_pairs(const float* qs, const uint16_t* keys, int n, int hd, float scale, float* scores) {
  const float* q1[1] = {qs};
  float* s1[1] = {scores};
  if (hd == 64) return score_keys_pairs_tile<64>(q1, 1, keys, n, hd, scale, s1);
  if (hd == 128) return score_keys_pairs_tile<128>(q1, 1, keys, n, hd, scale, s1);
  score_keys_pairs_tile<0>(q1, 1, keys, n, hd, scale, s1);
}

// The same for up to kMaxTile queries that see the same n keys.
inline void score_keys_pairs_multi(const float* const* qs, int nq, const uint16_t* keys, int n, int hd, float scale,
                                   float* const* scores) {
  if (hd == 64) return score_keys_pairs_tile<64>(qs, nq, keys, n, hd, scale, scores);
  if (hd == 128) return score_keys_pairs_tile<128>(qs, nq, keys, n, hd, scale, scores);
  score_keys_pairs_tile<0>(qs, nq, keys, n, hd, scale, scores);
}

constexpr int kPairKeysPerPass = 16;
#elif defined(__AVX2__)
// 16 bf16 elements at p: the even ones and the odd ones as f32.
inline void load_pairs(const uint16_t* p, __m256& even, __m256& odd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// scores[j] = q . k_j * scale for 8 keys (qs: q in pair order): score_8_keys's reduction over pair-order sums.
template <int HD>
inline void score_8_keys_pairs(const float* qs, const uint16_t* keys, int hd, float scale, float* scores) {
  if constexpr (HD > 0) hd = HD;
  __m256 part[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const uint16_t* k = keys + static_cast<int64_t>(j) * hd;
    __m256 even, odd;
    load_pairs(k, even, odd);
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qs), even);
    a = _mm256_fmadd_ps(_mm256_loadu_ps(qs + 8), odd, a);
    for (int c = 16; c < hd; c += 16) {
      load_pairs(k + c, even, odd);
      a = _mm256_fmadd_ps(_mm256_loadu_ps(qs + c), even, a);
      a = _mm256_fmadd_ps(_mm256_loadu_ps(qs + c + 8), odd, a);
    }
    part[j] = a;
  }
  _mm256_storeu_ps(scores, _mm256_mul_ps(sum_lanes_8(part), _mm256_set1_ps(scale)));
}

// scores[j] for keys [0, n / 8 * 8) of a block, one query.
inline void score_keys_pairs(const float* qs, const uint16_t* keys, int n, int hd, float scale, float* scores) {
  int j = 0;
  if (hd == 64) {
    for (; j + 8 <= n; j += 8) score_8_keys_pairs<64>(qs, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  } else if (hd == 128) {
    for (; j + 8 <= n; j += 8) score_8_keys_pairs<128>(qs, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  } else {
    for (; j + 8 <= n; j += 8) score_8_keys_pairs<0>(qs, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  }
}

// Query by query: AVX2 has no multi-query kernels (16 registers).
inline void score_keys_pairs_multi(const float* const* qs, int nq, const uint16_t* keys, int n, int hd, float scale,
                                   float* const* scores) {
  for (int t = 0; t < nq; ++t) score_keys_pairs(qs[t], keys, n, hd, scale, scores[t]);
}

// acc (pair order, RUNS runs of 16 elements) += sum_j w[j] * v_j over n keys: 2 RUNS accumulators in registers.
template <int RUNS>
[[gnu::always_inline]] inline void accumulate_pairs(const float* w, const uint16_t* values, int n, int64_t stride,
                                                    float* acc) {
  __m256 a[2 * RUNS];
  for (int c = 0; c < 2 * RUNS; ++c) a[c] = _mm256_loadu_ps(acc + 8 * c);
  for (int j = 0; j < n; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const uint16_t* v = values + static_cast<int64_t>(j) * stride;
    for (int c = 0; c < RUNS; ++c) {
      __m256 even, odd;
      load_pairs(v + 16 * c, even, odd);
      a[2 * c] = _mm256_fmadd_ps(wj, even, a[2 * c]);
      a[2 * c + 1] = _mm256_fmadd_ps(wj, odd, a[2 * c + 1]);
    }
  }
  for (int c = 0; c < 2 * RUNS; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

// One query's acc (pair order) += sum_j w[j] * v_j over n keys: 64 elements (four runs) at a time in registers.
inline void accumulate_values_pairs(const float* w, const uint16_t* values, int n, int hd, float* acc) {
  for (int c0 = 0; c0 < hd; c0 += 64) {
    switch (std::min(4, (hd - c0) / 16)) {
      case 1: accumulate_pairs<1>(w, values + c0, n, hd, acc + c0); break;
      case 2: accumulate_pairs<2>(w, values + c0, n, hd, acc + c0); break;
      case 3: accumulate_pairs<3>(w, values + c0, n, hd, acc + c0); break;
      default: accumulate_pairs<4>(w, values + c0, n, hd, acc + c0); break;
    }
  }
}

inline void add_values_pairs_tile(const float* const* w, const int* n, int nq, const uint16_t* values, int hd,
                                  float* const* acc) {
  for (int t = 0; t < nq; ++t) accumulate_values_pairs(w[t], values, n[t], hd, acc[t]);
}

constexpr int kPairKeysPerPass = 8;
#else
// The portable instance never splits (pairs_split is false there): these are not reached.
inline void score_keys_pairs(const float*, const uint16_t*, int, int, float, float*) {}
inline void score_keys_pairs_multi(const float* const*, int, const uint16_t*, int, int, float, float* const*) {}
inline void accumulate_values_pairs(const float*, const uint16_t*, int, int, float*) {}
inline void add_values_pairs_tile(const float* const*, const int*, int, const uint16_t*, int, float* const*) {}
constexpr int kPairKeysPerPass = 1;
#endif
