// The vector kernels of paged attention (attention_impl.inl includes this inside its instance's namespace, after Kv
// and kMaxTile): per instruction set the f32 vector type and its operations, the K/V row loads with their conversions,
// the 16-key (AVX-512) and 8-key (AVX2) score reductions; then kernels written once over a row reader (Natural<D>, or
// Bf16Pairs from attention_bf16_pairs.inl) and shared by both instruction sets: a key's dot product, value
// accumulation for one query or a tile, and the scores of whole passes of keys. Every kernel of an instance sums a
// query's products in the same order whatever the tile, so a query's bits do not depend on its batch. The portable
// instance defines none of them.
#pragma once

#if defined(__AVX512F__)
// The instance's f32 vector (16 lanes) and the operations the shared kernels below use on it.
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vbroadcast(float x) { return _mm512_set1_ps(x); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }

// 16 keys' f32 values of one feature chunk: elements [0, 16) of p.
template <DType D>
inline __m512 load16(const typename Kv<D>::Elem* p) {
  if constexpr (D == DType::f32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (D == DType::i8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (D == DType::bf16) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

// K/V rows read in their own order: 16 elements per load, in one vector.
template <DType D>
struct Natural {
  using Elem = typename Kv<D>::Elem;
  static constexpr int kElems = 16, kVecs = 1;
  [[gnu::always_inline]] static void load(const Elem* p, Vec* v) { v[0] = load16<D>(p); }
};

// The first two levels of a 16-key butterfly: half h of fold_256(a, b) holds the partial sums of (a, b)[h]; 128-bit
// lane c of fold_128(a, b), of the (a, a, b, b)[c] whose halves fold_256 made.
inline __m512 fold_256(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
inline __m512 fold_128(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The last two levels of a 16-key butterfly: s[j]'s 128-bit lane c holds four partial sums of key 4j + c
// (j < 4); the result's lane 4c + e is the sum of key 4e + c.
inline __m512 sum_quads_16(const __m512* s) {
  __m512 u[2];
  for (int k = 0; k < 2; ++k) {  // lane c, elements {0, 1}: key 8k + c; elements {2, 3}: key 8k + 4 + c
    u[k] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// scores[j] = q . k_j * scale for 16 keys of head_dim 8 (stories260K's): two keys per vector, one 128-bit
// shuffle level brings each key's products into one lane of four, sum_quads_16 does the rest, and a permutation
// puts key j in lane j.
template <DType D>
inline void score_16_keys_hd8(const float* q, const typename Kv<D>::Elem* keys, float scale, float* scores) {
  const __m512 q8 = _mm512_castps256_ps512(_mm256_loadu_ps(q));
  const __m512 qq = _mm512_shuffle_f32x4(q8, q8, _MM_SHUFFLE(1, 0, 1, 0));  // q in both halves
  __m512 s[4];
  for (int j = 0; j < 4; ++j) {  // keys 4j .. 4j + 3: lane c of s[j] holds key 4j + c's partial sums
    const __m512 a = _mm512_mul_ps(load16<D>(keys + 32 * j), qq);
    const __m512 b = _mm512_mul_ps(load16<D>(keys + 32 * j + 16), qq);
    s[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  const __m512i key_of_lane = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 sums = _mm512_permutexvar_ps(key_of_lane, sum_quads_16(s));
  _mm512_storeu_ps(scores, _mm512_mul_ps(sums, _mm512_set1_ps(scale)));
}

// acc[0..8) += sum_j w[j] * v_j over n keys of head_dim 8: two keys per vector, halves added at the end.
template <DType D>
inline void accumulate_values_hd8(const float* w, const typename Kv<D>::Elem* values, int n, float* acc) {
  __m512 a = _mm512_zextps256_ps512(_mm256_loadu_ps(acc));
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m512 wj = _mm512_shuffle_f32x4(_mm512_set1_ps(w[j]), _mm512_set1_ps(w[j + 1]), _MM_SHUFFLE(1, 0, 1, 0));
    a = _mm512_fmadd_ps(wj, load16<D>(values + static_cast<int64_t>(j) * 8), a);
  }
  __m256 sum = _mm256_add_ps(_mm512_castps512_ps256(a),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
  if (j < n) {  // an odd last key
    alignas(32) float v[8];
    for (int d = 0; d < 8; ++d) v[d] = Kv<D>::f32(values[static_cast<int64_t>(j) * 8 + d]);
    sum = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_load_ps(v), sum);
  }
  _mm256_storeu_ps(acc, sum);
}
#elif defined(__AVX2__)
// The instance's f32 vector (8 lanes) and the operations the shared kernels below use on it.
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vbroadcast(float x) { return _mm256_set1_ps(x); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }

// 8 consecutive elements of a K/V row as f32 (F16C for f16).
template <DType D>
inline __m256 load8(const typename Kv<D>::Elem* p) {
  if constexpr (D == DType::f32) {
    return _mm256_loadu_ps(p);
  } else if constexpr (D == DType::i8) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (D == DType::bf16) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

// K/V rows read in their own order: 8 elements per load, in one vector.
template <DType D>
struct Natural {
  using Elem = typename Kv<D>::Elem;
  static constexpr int kElems = 8, kVecs = 1;
  [[gnu::always_inline]] static void load(const Elem* p, Vec* v) { v[0] = load8<D>(p); }
};

// Sums each of 8 vectors across its lanes, in one vector: lane j of the result is the sum of v[j] (two levels of
// horizontal adds, then the two 128-bit halves added).
inline __m256 sum_lanes_8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // half h: v[0..3] (u0), v[4..7] (u1)
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

#include "executors/cpu/attention_bf16_pairs.inl"

#if defined(__AVX2__)
// Kernels over a row reader R (Natural<D>, or Bf16Pairs from attention_bf16_pairs.inl): R::load(p, v) turns the
// R::kElems elements at p into R::kVecs vectors, vector i pairing with the query's (and the value accumulator's)
// floats [c + kLanes i, c + kLanes (i + 1)) for the load at element c. The query and the accumulators are in R's order.

// One key's kLanes partial sums of q . k: the first load's vectors multiplied, every later one added in order.
template <class R, int HD>
[[gnu::always_inline]] inline Vec key_dot(const float* q, const typename R::Elem* k, int hd) {
  if constexpr (HD > 0) hd = HD;
  Vec v[R::kVecs];
  R::load(k, v);
  Vec a = vmul(vload(q), v[0]);
  for (int i = 1; i < R::kVecs; ++i) a = vfma(vload(q + kLanes * i), v[i], a);
  for (int c = R::kElems; c < hd; c += R::kElems) {
    R::load(k + c, v);
    for (int i = 0; i < R::kVecs; ++i) a = vfma(vload(q + c + kLanes * i), v[i], a);
  }
  return a;
}

// acc[t][0, LOADS R::kElems) += sum_j w[t][j] * v_j over query t's n[t] keys (rows `stride` elements apart) for Q
// queries: each value load converted once for all of them, the accumulators in registers (counts known at compile
// time, so that none lives in memory). Per query the same operations in the same order for every Q.
template <class R, int LOADS, int Q>
[[gnu::always_inline]] inline void accumulate_multi(const float* const* w, const int* n, const typename R::Elem* values,
                                                    int64_t stride, float* const* acc) {
  constexpr int kAccs = LOADS * R::kVecs;
  Vec a[Q][kAccs], v[R::kVecs];
  int n_min = n[0], n_max = n[0];
  for (int t = 0; t < Q; ++t) {
    n_min = std::min(n_min, n[t]);
    n_max = std::max(n_max, n[t]);
    for (int c = 0; c < kAccs; ++c) a[t][c] = vload(acc[t] + kLanes * c);
  }
  int j = 0;
  for (; j < n_min; ++j) {  // keys every query sees
    const typename R::Elem* row = values + static_cast<int64_t>(j) * stride;
    Vec wj[Q];
    for (int t = 0; t < Q; ++t) wj[t] = vbroadcast(w[t][j]);
    for (int l = 0; l < LOADS; ++l) {
      R::load(row + R::kElems * l, v);
      for (int t = 0; t < Q; ++t)
        for (int i = 0; i < R::kVecs; ++i) a[t][l * R::kVecs + i] = vfma(wj[t], v[i], a[t][l * R::kVecs + i]);
    }
  }
  for (; j < n_max; ++j) {  // keys only the later queries see
    const typename R::Elem* row = values + static_cast<int64_t>(j) * stride;
    for (int l = 0; l < LOADS; ++l) {
      R::load(row + R::kElems * l, v);
      for (int t = 0; t < Q; ++t) {
        if (j >= n[t]) continue;
        for (int i = 0; i < R::kVecs; ++i)
          a[t][l * R::kVecs + i] = vfma(vbroadcast(w[t][j]), v[i], a[t][l * R::kVecs + i]);
      }
    }
  }
  for (int t = 0; t < Q; ++t)
    for (int c = 0; c < kAccs; ++c) vstore(acc[t] + kLanes * c, a[t][c]);
}

// One query's: the same operations as accumulate_multi (the same bits), without its bookkeeping.
template <class R, int LOADS>
[[gnu::always_inline]] inline void accumulate_one(const float* w, const typename R::Elem* values, int n, int64_t stride,
                                                  float* acc) {
  constexpr int kAccs = LOADS * R::kVecs;
  Vec a[kAccs], v[R::kVecs];
  for (int c = 0; c < kAccs; ++c) a[c] = vload(acc + kLanes * c);
  for (int j = 0; j < n; ++j) {
    const Vec wj = vbroadcast(w[j]);
    const typename R::Elem* row = values + static_cast<int64_t>(j) * stride;
    for (int l = 0; l < LOADS; ++l) {
      R::load(row + R::kElems * l, v);
      for (int i = 0; i < R::kVecs; ++i) a[l * R::kVecs + i] = vfma(wj, v[i], a[l * R::kVecs + i]);
    }
  }
  for (int c = 0; c < kAccs; ++c) vstore(acc + kLanes * c, a[c]);
}

// Up to kMaxTile queries' values over one group of LOADS loads: in kernels of four, two or one queries where the
// instance has registers for them (AVX-512), else query by query.
template <class R, int LOADS>
inline void accumulate_tile(const float* const* w, const int* n, int nq, const typename R::Elem* values, int64_t stride,
                            float* const* acc) {
  int t = 0;
#if defined(__AVX512F__)
  for (; t + 4 <= nq; t += 4) accumulate_multi<R, LOADS, 4>(w + t, n + t, values, stride, acc + t);
  for (; t + 2 <= nq; t += 2) accumulate_multi<R, LOADS, 2>(w + t, n + t, values, stride, acc + t);
#endif
  for (; t < nq; ++t) accumulate_one<R, LOADS>(w[t], values, n[t], stride, acc[t]);
}

// f(std::integral_constant<int, L>) for the load count L = loads, a runtime value in [1, MAX].
template <int MAX, class F>
[[gnu::always_inline]] inline void with_loads(int loads, F&& f) {
  if constexpr (MAX > 1) {
    if (loads < MAX) return with_loads<MAX - 1>(loads, f);
  }
  f(std::integral_constant<int, MAX>{});
}

// acc[t][0, hd) += sum_j w[t][j] * v_j over query t's n[t] keys of a block (head_dim a multiple of R::kElems): 64
// features at a time in registers. Not inlined: inlined into attend, GCC outlined attend's block loop instead (its
// captured variables then read through memory: an AVX2 prefill 4-8% slower).
template <class R>
[[gnu::noinline]] void add_values_in(const float* const* w, const int* n, int nq, const typename R::Elem* values,
                                     int hd, float* const* acc) {
  float* at[kMaxTile];
  for (int c0 = 0; c0 < hd; c0 += 64) {
    for (int t = 0; t < nq; ++t) at[t] = acc[t] + c0;
    with_loads<64 / R::kElems>(std::min(64, hd - c0) / R::kElems, [&](auto loads) {
      accumulate_tile<R, decltype(loads)::value>(w, n, nq, values + c0, hd, at);
    });
  }
}
#endif

#if defined(__AVX512F__)
// scores[t][j] = q[t] . k_j * scale for 16 keys and Q queries, head_dim a multiple of R::kElems (HD: known at
// compile time, 0: hd): each key's loads converted once for all the queries. Per query, one accumulator per key, then
// a butterfly of 256-bit, 128-bit and in-lane shuffles (45 instructions instead of 16 separate reductions) that puts
// key j's sum in lane j: key j's products are part 4 (j % 4) + j / 4, parts are made in order, each pair of parts is
// summed into a first-level vector (half h: the partial sums of part 2i + h) and each pair of those into a
// second-level one (128-bit lane c: of part 4i + c) as soon as both exist, and sum_quads_16 does the rest. The same
// operations on the same values for every Q (key_dot's): a query's scores are the same bits alone and in a tile.
template <class R, int HD, int Q>
[[gnu::always_inline]] inline void score_16_keys_multi(const float* const* q, const typename R::Elem* keys, int hd,
                                                       float scale, float* const* scores) {
  if constexpr (HD > 0) hd = HD;
  __m512 second[Q][4], first[Q], part[Q];
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    const typename R::Elem* k = keys + static_cast<int64_t>((m % 4) * 4 + m / 4) * hd;
    __m512 a[Q], v[R::kVecs];
    R::load(k, v);
    for (int t = 0; t < Q; ++t) {
      a[t] = vmul(vload(q[t]), v[0]);
      for (int i = 1; i < R::kVecs; ++i) a[t] = vfma(vload(q[t] + kLanes * i), v[i], a[t]);
    }
    for (int c = R::kElems; c < hd; c += R::kElems) {
      R::load(k + c, v);
      for (int t = 0; t < Q; ++t)
        for (int i = 0; i < R::kVecs; ++i) a[t] = vfma(vload(q[t] + c + kLanes * i), v[i], a[t]);
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

// One query's 16 scores: the same operations as score_16_keys_multi (the same bits), the keys taken in address order
// (a decode reads them from memory: the hardware prefetcher follows a sequential stream) and every part kept in a
// register until the butterfly.
template <class R, int HD>
[[gnu::always_inline]] inline void score_16_keys(const float* q, const typename R::Elem* keys, int hd, float scale,
                                                 float* scores) {
  if constexpr (HD > 0) hd = HD;
  __m512 part[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j)  // unrolled: every part[] index a constant, so the parts stay in registers
    part[(j % 4) * 4 + j / 4] = key_dot<R, HD>(q, keys + static_cast<int64_t>(j) * hd, hd);
  __m512 first[8], second[4];
  for (int i = 0; i < 8; ++i) first[i] = fold_256(part[2 * i], part[2 * i + 1]);
  for (int i = 0; i < 4; ++i) second[i] = fold_128(first[2 * i], first[2 * i + 1]);
  _mm512_storeu_ps(scores, _mm512_mul_ps(sum_quads_16(second), _mm512_set1_ps(scale)));
}

// Up to kMaxTile queries' 16-key scores over n keys (n a multiple of 16), in kernels of four, two or one queries.
template <class R, int HD>
inline void score_16_keys_tile(const float* const* q, int nq, const typename R::Elem* keys, int n, int hd,
                               float scale, float* const* scores) {
  for (int j = 0; j + 16 <= n; j += 16) {
    const typename R::Elem* k = keys + static_cast<int64_t>(j) * hd;
    float* at[4];
    int t = 0;
    for (; t + 4 <= nq; t += 4) {
      for (int u = 0; u < 4; ++u) at[u] = scores[t + u] + j;
      score_16_keys_multi<R, HD, 4>(q + t, k, hd, scale, at);
    }
    for (; t + 2 <= nq; t += 2) {
      for (int u = 0; u < 2; ++u) at[u] = scores[t + u] + j;
      score_16_keys_multi<R, HD, 2>(q + t, k, hd, scale, at);
    }
    for (; t < nq; ++t) score_16_keys<R, HD>(q[t], k, hd, scale, scores[t] + j);
  }
}

constexpr int kKeysPerPass = 16;

// Scores of up to kMaxTile queries over keys [0, n / 16 * 16) of a block, head_dim a multiple of R::kElems.
template <class R>
inline void score_key_passes(const float* const* q, int nq, const typename R::Elem* keys, int n, int hd, float scale,
                             float* const* scores) {
  if (hd == 64) return score_16_keys_tile<R, 64>(q, nq, keys, n, hd, scale, scores);
  if (hd == 128) return score_16_keys_tile<R, 128>(q, nq, keys, n, hd, scale, scores);
  score_16_keys_tile<R, 0>(q, nq, keys, n, hd, scale, scores);
}
#elif defined(__AVX2__)
// scores[j] = q . k_j * scale for 8 keys, head_dim a multiple of R::kElems (HD: known at compile time, 0: hd): one
// accumulator per key (key_dot), then one reduction; the same arithmetic for every HD.
template <class R, int HD>
inline void score_8_keys(const float* q, const typename R::Elem* keys, int hd, float scale, float* scores) {
  if constexpr (HD > 0) hd = HD;
  __m256 part[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) part[j] = key_dot<R, HD>(q, keys + static_cast<int64_t>(j) * hd, hd);
  _mm256_storeu_ps(scores, _mm256_mul_ps(sum_lanes_8(part), _mm256_set1_ps(scale)));
}

constexpr int kKeysPerPass = 8;

// Scores over keys [0, n / 8 * 8) of a block, query by query (16 registers: no multi-query kernels), head_dim a
// multiple of R::kElems.
template <class R, int HD>
inline void score_8_keys_passes(const float* const* q, int nq, const typename R::Elem* keys, int n, int hd,
                                float scale, float* const* scores) {
  for (int t = 0; t < nq; ++t)
    for (int j = 0; j + 8 <= n; j += 8)
      score_8_keys<R, HD>(q[t], keys + static_cast<int64_t>(j) * hd, hd, scale, scores[t] + j);
}
template <class R>
inline void score_key_passes(const float* const* q, int nq, const typename R::Elem* keys, int n, int hd, float scale,
                             float* const* scores) {
  if (hd == 64) return score_8_keys_passes<R, 64>(q, nq, keys, n, hd, scale, scores);
  if (hd == 128) return score_8_keys_passes<R, 128>(q, nq, keys, n, hd, scale, scores);
  score_8_keys_passes<R, 0>(q, nq, keys, n, hd, scale, scores);
}
#else
constexpr int kKeysPerPass = 1;
#endif
