// Causal attention over paged K/V, flash-attention style with an online softmax, one query at a time: every query
// (a decode's, or each of a prefill chunk's) goes through the same arithmetic, so a token's output is bit for bit
// the same whether it is computed alone, in a prefill chunk of any size and offset, or again after a preemption by
// recompute (batch invariance: a request's output does not depend on what it was batched with). Keys go in spans of
// whole blocks aligned to the sequence's start, for all the heads asked for, scoring 16 (AVX-512) or 8 (AVX2) keys
// per pass where head_dim allows, converting bf16/f16/int8 K/V in registers, with one online-softmax update per
// head per span; int8 rows' scales (core/kv_rows.hpp) multiply a key's score and a value's softmax weight.
// Intrinsics where they pay, else portable C++ whose inner loops the compiler vectorises: included once
// per instruction set by attention_{avx512,avx2,portable}.cpp (each compiled with its own -m flags), which define
// ACTORD_ATTENTION_NS to the namespace of their instance; attention.cpp picks one at run time.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kv_rows.hpp"
#include "executors/cpu/kernels.hpp"
#include "executors/cpu/vector_math.hpp"

#ifndef ACTORD_ATTENTION_NS
#error "define ACTORD_ATTENTION_NS (the namespace of this instance) before including attention_impl.inl"
#endif

namespace actord::cpu::ACTORD_ATTENTION_NS {
namespace {

// One bf16/f16 cache element as f32. Branch-free, so that loops over it vectorise.
template <DType D>
inline float to_f32(uint16_t h) {
  if constexpr (D == DType::bf16) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  } else {
    // f16 -> f32: shift exponent and mantissa into place and rescale by 2^112 (normals and subnormals alike);
    // infinities and NaNs keep an all-ones exponent.
    const uint32_t magnitude = h & 0x7fffu, sign = (h & 0x8000u) << 16;
    const float finite = std::bit_cast<float>(magnitude << 13) * 0x1p112f;
    const uint32_t bits = magnitude >= 0x7c00u ? (magnitude << 13) | 0x7f800000u : std::bit_cast<uint32_t>(finite);
    return std::bit_cast<float>(bits | sign);
  }
}

// The cache's element type for a dtype, and its conversion (an i8 code as it is, its row's scale applied apart).
template <DType D>
struct Kv {
  using Elem = std::conditional_t<D == DType::f32, float, std::conditional_t<D == DType::i8, int8_t, uint16_t>>;
  static float f32(Elem e) {
    if constexpr (D == DType::f32 || D == DType::i8) {
      return static_cast<float>(e);
    } else {
      return to_f32<D>(e);
    }
  }
};

// Queries of a prefill attended together (their K/V rows read and converted once for all of them).
constexpr int kMaxTile = 4;

// One thread's scratch for a query: its state per head ([heads][head_dim], [heads]) and one span's scores
// ([heads][span]).
struct QueryState {
  std::vector<float> head_acc, head_max, head_denom;
  std::vector<float> head_scores;
  std::vector<float> scaled_weights;  // [block_size]: one block's softmax weights times its i8 value scales
  std::vector<float> q_pairs;         // [heads][head_dim]: the query in pair order (attention_bf16_pairs.inl)
};

#if defined(__AVX512F__)
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

// scores[t][j] = q[t] . k_j * scale for 16 keys and Q queries, head_dim a multiple of 16 (HD: known at compile
// time, 0: hd): each key's K chunks are converted once for all the queries. Per query, one accumulator per key, then
// a butterfly of 256-bit, 128-bit and in-lane shuffles (45 instructions instead of 16 separate reductions) that puts
// key j's sum in lane j: key j's products are part 4 (j % 4) + j / 4, parts are made in order, each pair of parts is
// summed into a first-level vector (half h: the partial sums of part 2i + h) and each pair of those into a
// second-level one (128-bit lane c: of part 4i + c) as soon as both exist, and sum_quads_16 does the rest. The same
// operations on the same values for every Q: a query's scores are the same bits alone and in a tile.
template <DType D, int HD, int Q>
[[gnu::always_inline]] inline void score_16_keys_multi(const float* const* q, const typename Kv<D>::Elem* keys,
                                                       int hd, float scale, float* const* scores) {
  if constexpr (HD > 0) hd = HD;
  __m512 second[Q][4], first[Q], part[Q];
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    const typename Kv<D>::Elem* k = keys + static_cast<int64_t>((m % 4) * 4 + m / 4) * hd;
    __m512 a[Q];
    const __m512 k0 = load16<D>(k);
    for (int t = 0; t < Q; ++t) a[t] = _mm512_mul_ps(_mm512_loadu_ps(q[t]), k0);
    for (int c = 16; c < hd; c += 16) {
      const __m512 kc = load16<D>(k + c);
      for (int t = 0; t < Q; ++t) a[t] = _mm512_fmadd_ps(_mm512_loadu_ps(q[t] + c), kc, a[t]);
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
template <DType D, int HD>
[[gnu::always_inline]] inline void score_16_keys(const float* q, const typename Kv<D>::Elem* keys, int hd,
                                                 float scale, float* scores) {
  if constexpr (HD > 0) hd = HD;
  __m512 part[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {  // unrolled: every part[] index a constant, so the parts stay in registers
    const typename Kv<D>::Elem* k = keys + static_cast<int64_t>(j) * hd;
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), load16<D>(k));
    for (int c = 16; c < hd; c += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), load16<D>(k + c), a);
    part[(j % 4) * 4 + j / 4] = a;
  }
  __m512 first[8], second[4];
  for (int i = 0; i < 8; ++i) first[i] = fold_256(part[2 * i], part[2 * i + 1]);
  for (int i = 0; i < 4; ++i) second[i] = fold_128(first[2 * i], first[2 * i + 1]);
  _mm512_storeu_ps(scores, _mm512_mul_ps(sum_quads_16(second), _mm512_set1_ps(scale)));
}

// Up to kMaxTile queries' 16-key scores over n keys (n a multiple of 16), in kernels of four, two or one queries.
template <DType D, int HD>
inline void score_16_keys_tile(const float* const* q, int nq, const typename Kv<D>::Elem* keys, int n, int hd,
                               float scale, float* const* scores) {
  for (int j = 0; j + 16 <= n; j += 16) {
    const typename Kv<D>::Elem* k = keys + static_cast<int64_t>(j) * hd;
    float* at[4];
    int t = 0;
    for (; t + 4 <= nq; t += 4) {
      for (int u = 0; u < 4; ++u) at[u] = scores[t + u] + j;
      score_16_keys_multi<D, HD, 4>(q + t, k, hd, scale, at);
    }
    for (; t + 2 <= nq; t += 2) {
      for (int u = 0; u < 2; ++u) at[u] = scores[t + u] + j;
      score_16_keys_multi<D, HD, 2>(q + t, k, hd, scale, at);
    }
    for (; t < nq; ++t) score_16_keys<D, HD>(q[t], k, hd, scale, scores[t] + j);
  }
}

// acc[t][0, 16 CHUNKS) += sum_j w[t][j] * v_j[0, 16 CHUNKS) over query t's n[t] keys (rows `stride` elements
// apart) for Q queries: each value chunk converted once for all of them, the accumulators in registers (counts known
// at compile time, so that none lives in memory). Per query the same operations in the same order for every Q.
template <DType D, int CHUNKS, int Q>
[[gnu::always_inline]] inline void accumulate_chunks_multi(const float* const* w, const int* n,
                                                           const typename Kv<D>::Elem* values, int64_t stride,
                                                           float* const* acc) {
  __m512 a[Q][CHUNKS];
  int n_min = n[0], n_max = n[0];
  for (int t = 0; t < Q; ++t) {
    n_min = std::min(n_min, n[t]);
    n_max = std::max(n_max, n[t]);
    for (int c = 0; c < CHUNKS; ++c) a[t][c] = _mm512_loadu_ps(acc[t] + 16 * c);
  }
  int j = 0;
  for (; j < n_min; ++j) {  // keys every query sees
    const typename Kv<D>::Elem* v = values + static_cast<int64_t>(j) * stride;
    __m512 wj[Q];
    for (int t = 0; t < Q; ++t) wj[t] = _mm512_set1_ps(w[t][j]);
    for (int c = 0; c < CHUNKS; ++c) {
      const __m512 vc = load16<D>(v + 16 * c);
      for (int t = 0; t < Q; ++t) a[t][c] = _mm512_fmadd_ps(wj[t], vc, a[t][c]);
    }
  }
  for (; j < n_max; ++j) {  // keys only the later queries see
    const typename Kv<D>::Elem* v = values + static_cast<int64_t>(j) * stride;
    for (int c = 0; c < CHUNKS; ++c) {
      const __m512 vc = load16<D>(v + 16 * c);
      for (int t = 0; t < Q; ++t) {
        if (j < n[t]) a[t][c] = _mm512_fmadd_ps(_mm512_set1_ps(w[t][j]), vc, a[t][c]);
      }
    }
  }
  for (int t = 0; t < Q; ++t)
    for (int c = 0; c < CHUNKS; ++c) _mm512_storeu_ps(acc[t] + 16 * c, a[t][c]);
}

// One query's: the same operations as accumulate_chunks_multi (the same bits), without its bookkeeping.
template <DType D, int CHUNKS>
[[gnu::always_inline]] inline void accumulate_chunks(const float* w, const typename Kv<D>::Elem* values, int n,
                                                     int64_t stride, float* acc) {
  __m512 a[CHUNKS];
  for (int c = 0; c < CHUNKS; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
  for (int j = 0; j < n; ++j) {
    const __m512 wj = _mm512_set1_ps(w[j]);
    const typename Kv<D>::Elem* v = values + static_cast<int64_t>(j) * stride;
    for (int c = 0; c < CHUNKS; ++c) a[c] = _mm512_fmadd_ps(wj, load16<D>(v + 16 * c), a[c]);
  }
  for (int c = 0; c < CHUNKS; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

// Up to four queries' values over a 64-feature group of CHUNKS chunks, in kernels of four, two or one queries.
template <DType D, int CHUNKS>
inline void accumulate_chunks_tile(const float* const* w, const int* n, int nq, const typename Kv<D>::Elem* values,
                                   int64_t stride, float* const* acc) {
  int t = 0;
  for (; t + 4 <= nq; t += 4) accumulate_chunks_multi<D, CHUNKS, 4>(w + t, n + t, values, stride, acc + t);
  for (; t + 2 <= nq; t += 2) accumulate_chunks_multi<D, CHUNKS, 2>(w + t, n + t, values, stride, acc + t);
  for (; t < nq; ++t) accumulate_chunks<D, CHUNKS>(w[t], values, n[t], stride, acc[t]);
}

// acc += sum_j w[j] * v_j over n keys, head_dim a multiple of 16: 64 features at a time in registers.
template <DType D>
[[gnu::always_inline]] inline void accumulate_values(const float* w, const typename Kv<D>::Elem* values, int n,
                                                     int hd, float* acc) {
  for (int c0 = 0; c0 < hd; c0 += 64) {
    switch (std::min(4, (hd - c0) / 16)) {
      case 1: accumulate_chunks<D, 1>(w, values + c0, n, hd, acc + c0); break;
      case 2: accumulate_chunks<D, 2>(w, values + c0, n, hd, acc + c0); break;
      case 3: accumulate_chunks<D, 3>(w, values + c0, n, hd, acc + c0); break;
      default: accumulate_chunks<D, 4>(w, values + c0, n, hd, acc + c0); break;
    }
  }
}
#elif defined(__AVX2__)
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

// Sums each of 8 vectors across its lanes, in one vector: lane j of the result is the sum of v[j] (two levels of
// horizontal adds, then the two 128-bit halves added).
inline __m256 sum_lanes_8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // half h: v[0..3] (u0), v[4..7] (u1)
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// scores[j] = q . k_j * scale for 8 keys, head_dim a multiple of 8 (HD: known at compile time, 0: hd): one
// accumulator per key, then one reduction; the same arithmetic for every HD.
template <DType D, int HD>
inline void score_8_keys(const float* q, const typename Kv<D>::Elem* keys, int hd, float scale, float* scores) {
  if constexpr (HD > 0) hd = HD;
  __m256 part[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const typename Kv<D>::Elem* k = keys + static_cast<int64_t>(j) * hd;
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(q), load8<D>(k));
    for (int c = 8; c < hd; c += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), load8<D>(k + c), a);
    part[j] = a;
  }
  _mm256_storeu_ps(scores, _mm256_mul_ps(sum_lanes_8(part), _mm256_set1_ps(scale)));
}

// acc[0, 8 CHUNKS) += sum_j w[j] * v_j[0, 8 CHUNKS) over n keys whose rows are `stride` elements apart: the
// chunks' accumulators in registers (a count known at compile time, so that none lives in memory).
template <DType D, int CHUNKS>
[[gnu::always_inline]] inline void accumulate_chunks(const float* w, const typename Kv<D>::Elem* values, int n,
                                                     int64_t stride, float* acc) {
  __m256 a[CHUNKS];
  for (int c = 0; c < CHUNKS; ++c) a[c] = _mm256_loadu_ps(acc + 8 * c);
  for (int j = 0; j < n; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const typename Kv<D>::Elem* v = values + static_cast<int64_t>(j) * stride;
    for (int c = 0; c < CHUNKS; ++c) a[c] = _mm256_fmadd_ps(wj, load8<D>(v + 8 * c), a[c]);
  }
  for (int c = 0; c < CHUNKS; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

// acc += sum_j w[j] * v_j over n keys, head_dim a multiple of 8: 64 features at a time in registers; head_dim 8
// (one chunk) spreads the keys over four accumulators so the FMAs do not wait on each other.
template <DType D>
[[gnu::always_inline]] inline void accumulate_values(const float* w, const typename Kv<D>::Elem* values, int n,
                                                     int hd, float* acc) {
  if (hd == 8) {
    __m256 a[4] = {_mm256_loadu_ps(acc), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      for (int u = 0; u < 4; ++u) a[u] = _mm256_fmadd_ps(_mm256_set1_ps(w[j + u]), load8<D>(values + (j + u) * 8), a[u]);
    }
    for (; j < n; ++j) a[0] = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), load8<D>(values + j * 8), a[0]);
    _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
    return;
  }
  for (int c0 = 0; c0 < hd; c0 += 64) {
    switch (std::min(8, (hd - c0) / 8)) {
      case 1: accumulate_chunks<D, 1>(w, values + c0, n, hd, acc + c0); break;
      case 2: accumulate_chunks<D, 2>(w, values + c0, n, hd, acc + c0); break;
      case 3: accumulate_chunks<D, 3>(w, values + c0, n, hd, acc + c0); break;
      case 4: accumulate_chunks<D, 4>(w, values + c0, n, hd, acc + c0); break;
      case 5: accumulate_chunks<D, 5>(w, values + c0, n, hd, acc + c0); break;
      case 6: accumulate_chunks<D, 6>(w, values + c0, n, hd, acc + c0); break;
      case 7: accumulate_chunks<D, 7>(w, values + c0, n, hd, acc + c0); break;
      default: accumulate_chunks<D, 8>(w, values + c0, n, hd, acc + c0); break;
    }
  }
}
#endif

#include "executors/cpu/attention_bf16_pairs.inl"

// scores[j] = q . k_j * scale for the n keys of one head in one block: 16 (AVX-512) or 8 (AVX2) keys per pass when
// head_dim allows, otherwise four independent dot products per pass, bf16/f16 K converted in registers.
template <DType D>
void score_keys_tail(const float* q, const typename Kv<D>::Elem* keys, int j, int n, int hd, float scale,
                     float* scores);

template <DType D>
[[gnu::always_inline]] inline void score_keys(const float* q, const typename Kv<D>::Elem* keys, int n, int hd,
                                              float scale, float* scores) {
  int j = 0;
#if defined(__AVX512F__)
  if (hd == 64) {
    for (; j + 16 <= n; j += 16) score_16_keys<D, 64>(q, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  } else if (hd == 128) {
    for (; j + 16 <= n; j += 16) score_16_keys<D, 128>(q, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  } else if (hd % 16 == 0) {
    for (; j + 16 <= n; j += 16) score_16_keys<D, 0>(q, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  } else if (hd == 8) {
    for (; j + 16 <= n; j += 16) score_16_keys_hd8<D>(q, keys + static_cast<int64_t>(j) * hd, scale, scores + j);
  }
#elif defined(__AVX2__)
  if (hd == 64) {
    for (; j + 8 <= n; j += 8) score_8_keys<D, 64>(q, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  } else if (hd == 128) {
    for (; j + 8 <= n; j += 8) score_8_keys<D, 128>(q, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  } else if (hd % 8 == 0) {
    for (; j + 8 <= n; j += 8) score_8_keys<D, 0>(q, keys + static_cast<int64_t>(j) * hd, hd, scale, scores + j);
  }
#endif
  score_keys_tail<D>(q, keys, j, n, hd, scale, scores);
}

// score_keys for keys [j, n) of the block, past its vector passes: four independent dot products per pass, then one.
template <DType D>
void score_keys_tail(const float* q, const typename Kv<D>::Elem* keys, int j, int n, int hd, float scale,
                     float* scores) {
  using E = typename Kv<D>::Elem;
  for (; j + 4 <= n; j += 4) {
    const E* k = keys + static_cast<int64_t>(j) * hd;
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma omp simd reduction(+ : d0, d1, d2, d3)
    for (int d = 0; d < hd; ++d) {
      const float qd = q[d];
      d0 += qd * Kv<D>::f32(k[d]);
      d1 += qd * Kv<D>::f32(k[hd + d]);
      d2 += qd * Kv<D>::f32(k[2 * hd + d]);
      d3 += qd * Kv<D>::f32(k[3 * hd + d]);
    }
    scores[j] = d0 * scale;
    scores[j + 1] = d1 * scale;
    scores[j + 2] = d2 * scale;
    scores[j + 3] = d3 * scale;
  }
  for (; j < n; ++j) {
    const E* k = keys + static_cast<int64_t>(j) * hd;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int d = 0; d < hd; ++d) dot += q[d] * Kv<D>::f32(k[d]);
    scores[j] = dot * scale;
  }
}

// acc[0, hd) += sum_j w[j] * v_j over the n keys of one head in one block, bf16/f16 V converted in registers.
template <DType D>
[[gnu::always_inline]] inline void add_values(const float* w, const typename Kv<D>::Elem* values, int n, int hd,
                                              float* acc) {
  using E = typename Kv<D>::Elem;
#if defined(__AVX512F__)
  if (hd % 16 == 0) return accumulate_values<D>(w, values, n, hd, acc);
  if (hd == 8) return accumulate_values_hd8<D>(w, values, n, acc);
#elif defined(__AVX2__)
  if (hd % 8 == 0) return accumulate_values<D>(w, values, n, hd, acc);
#endif
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const E* v = values + static_cast<int64_t>(j) * hd;
    const float w0 = w[j], w1 = w[j + 1], w2 = w[j + 2], w3 = w[j + 3];
#pragma omp simd
    for (int d = 0; d < hd; ++d) {
      acc[d] += w0 * Kv<D>::f32(v[d]) + w1 * Kv<D>::f32(v[hd + d]) + w2 * Kv<D>::f32(v[2 * hd + d]) +
                w3 * Kv<D>::f32(v[3 * hd + d]);
    }
  }
  for (; j < n; ++j) {
    const E* v = values + static_cast<int64_t>(j) * hd;
    const float wj = w[j];
#pragma omp simd
    for (int d = 0; d < hd; ++d) acc[d] += wj * Kv<D>::f32(v[d]);
  }
}

// A tile's queries (at most kMaxTile) that see the same n keys of a block: scores[t][j] as score_keys gives them for
// q[t], the K rows converted once for all the queries where the instance has a multi-query kernel (AVX-512, head_dim
// a multiple of 16), else query by query.
template <DType D>
void score_keys_tile(const float* const* q, int nq, const typename Kv<D>::Elem* keys, int n, int hd, float scale,
                     float* const* scores) {
#if defined(__AVX512F__)
  if (hd % 16 == 0) {
    if (hd == 64) {
      score_16_keys_tile<D, 64>(q, nq, keys, n, hd, scale, scores);
    } else if (hd == 128) {
      score_16_keys_tile<D, 128>(q, nq, keys, n, hd, scale, scores);
    } else {
      score_16_keys_tile<D, 0>(q, nq, keys, n, hd, scale, scores);
    }
    for (int t = 0; t < nq; ++t) score_keys_tail<D>(q[t], keys, n / 16 * 16, n, hd, scale, scores[t]);
    return;
  }
#endif
  for (int t = 0; t < nq; ++t) score_keys<D>(q[t], keys, n, hd, scale, scores[t]);
}

// acc[t][0, hd) += sum_j w[t][j] * v_j over query t's n[t] keys of a block, as add_values gives it, each value row
// converted once for all the queries where the instance has a multi-query kernel (AVX-512, head_dim a multiple of
// 16), else query by query.
template <DType D>
void add_values_tile(const float* const* w, const int* n, int nq, const typename Kv<D>::Elem* values, int hd,
                     float* const* acc) {
#if defined(__AVX512F__)
  if (hd % 16 == 0) {
    float* at[kMaxTile];
    for (int c0 = 0; c0 < hd; c0 += 64) {
      for (int t = 0; t < nq; ++t) at[t] = acc[t] + c0;
      switch (std::min(4, (hd - c0) / 16)) {
        case 1: accumulate_chunks_tile<D, 1>(w, n, nq, values + c0, hd, at); break;
        case 2: accumulate_chunks_tile<D, 2>(w, n, nq, values + c0, hd, at); break;
        case 3: accumulate_chunks_tile<D, 3>(w, n, nq, values + c0, hd, at); break;
        default: accumulate_chunks_tile<D, 4>(w, n, nq, values + c0, hd, at); break;
      }
    }
    return;
  }
#endif
  for (int t = 0; t < nq; ++t) add_values<D>(w[t], values, n[t], hd, acc[t]);
}

// The largest of x[0, n) (-inf for none), in vectors: a loop of scalar maxima waits on each one's latency. Exact,
// whatever the order.
inline float max_of(const float* x, int n) {
  int i = 0;
  float m = -INFINITY;
#if defined(__AVX512F__)
  __m512 v = _mm512_set1_ps(-INFINITY);
  for (; i + 16 <= n; i += 16) v = _mm512_max_ps(v, _mm512_loadu_ps(x + i));
  m = _mm512_reduce_max_ps(v);
#elif defined(__AVX2__)
  __m256 v = _mm256_set1_ps(-INFINITY);
  for (; i + 8 <= n; i += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  for (float e : lanes) m = std::max(m, e);
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// Folds n new scores into one head's online softmax: turns them into weights exp(s - max) in place and rescales the
// head's accumulator and denominator when the running maximum grows.
inline void softmax_update(float* scores, int n, int hd, float* acc, float& max_score, float& denom) {
  const float span_max = max_of(scores, n);
  const float new_max = std::max(max_score, span_max);
  const float correction = exp_nonpositive(max_score - new_max);
  max_score = new_max;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) {
    scores[i] = exp_nonpositive(scores[i] - new_max);
    sum += scores[i];
  }
  denom = denom * correction + sum;
  if (correction != 1.0f) {
#pragma omp simd
    for (int d = 0; d < hd; ++d) acc[d] *= correction;
  }
}

// Keys per online-softmax update of a single query: the softmax's fixed costs (maximum, rescaling) are paid once per
// span of blocks instead of once per block, which is what bounds small heads (stories260K's head_dim 8).
constexpr int kSingleQuerySpan = 256;
// Software prefetch of the blocks ahead, for blocks small enough that the hardware prefetcher has no time to ramp up
// within one (stories260K's 2 KiB); larger ones (a 134M model's 24 KiB) it follows well, and prefetching those
// evicts the block being read.
constexpr int kPrefetchAhead = 2;  // blocks
constexpr int64_t kPrefetchMaxBytes = 4096;

// Queries t < nq (at most kMaxTile) at positions pos0 + t, for query heads [h_begin, h_end): q0 / out0 are the first
// token's rows of all heads, the others q_stride floats apart; several queries only without a sliding window. Keys
// [first, pos] go in spans of whole blocks aligned to the sequence's start: the span's scores for every head (block by
// block, and within a block head by head, so the heads' K of a block are read in address order: one sequential
// stream per block that the hardware prefetcher follows), one softmax update per head, then the span's values in the
// same order. The queries of a tile share each block's K and V rows where they see the same keys; each query's
// arithmetic is the same as alone (batch invariance). An i8 cache's rows are codes: a key's score is multiplied by
// its row's scale, and a value's softmax weight by its row's.
template <DType D>
void attend(const PagedAttentionParams& p, int h_begin, int h_end, int pos0, int nq, const float* q0, float* out0,
            int64_t q_stride, QueryState* st) {
  using E = typename Kv<D>::Elem;
  const int hd = p.head_dim, bs = p.block_size, group = p.n_heads / p.n_kv_heads, heads = h_end - h_begin;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int span_blocks = std::max(1, kSingleQuerySpan / bs), span = span_blocks * bs;
  constexpr bool kScaled = D == DType::i8;
  // bf16 rows read in pairs: each query's heads in pair order, the accumulators kept in it until the output.
  const bool pairs = pairs_split<D>(hd);
  for (int t = 0; t < nq; ++t) {
    if (pairs) {
      st[t].q_pairs.resize(static_cast<size_t>(heads) * hd);
      for (int h = h_begin; h < h_end; ++h)
        to_pair_order(q0 + t * q_stride + static_cast<int64_t>(h) * hd, hd,
                      st[t].q_pairs.data() + static_cast<int64_t>(h - h_begin) * hd);
    }
    st[t].head_acc.assign(static_cast<size_t>(heads) * hd, 0.0f);
    st[t].head_max.assign(heads, -INFINITY);
    st[t].head_denom.assign(heads, 0.0f);
    st[t].head_scores.resize(static_cast<size_t>(heads) * span);
    if constexpr (kScaled) st[t].scaled_weights.resize(bs);
  }
  const auto* k_base = static_cast<const E*>(p.k_base);
  const auto* v_base = static_cast<const E*>(p.v_base);
  const int pos_last = pos0 + nq - 1;
  const int first = p.sliding_window > 0 ? std::max(0, pos0 - p.sliding_window + 1) : 0;
  const int kv_begin = h_begin / group, kv_end = (h_end - 1) / group + 1;  // the KV heads read
  const int64_t prefetch_bytes = (kv_end - kv_begin) * p.head_stride * int64_t(sizeof(E));
  const bool prefetch = prefetch_bytes <= kPrefetchMaxBytes;
  const int64_t head_bytes = p.head_stride * int64_t(sizeof(E));
  auto prefetch_head = [&](const E* next, int h) {
    if (!next) return;
    const char* rows = reinterpret_cast<const char*>(next + (h / group - kv_begin) * p.head_stride);
    for (int64_t b = 0; b < head_bytes; b += 64) _mm_prefetch(rows + b, _MM_HINT_T0);
  };
  // Query t's head h in pair order (valid when `pairs`).
  auto q_pairs = [&](int t, int h) { return st[t].q_pairs.data() + static_cast<int64_t>(h - h_begin) * hd; };
  // One query's scores of n keys (q in natural order; qs the same in pair order, when `pairs`).
  auto score = [&](const float* q, const float* qs, const E* keys, int n, float* scores) {
    if constexpr (D == DType::bf16) {
      if (pairs) {
        score_keys_pairs(qs, keys, n, hd, scale, scores);
        return score_keys_tail<D>(q, keys, n / kPairKeysPerPass * kPairKeysPerPass, n, hd, scale, scores);
      }
    }
    score_keys<D>(q, keys, n, hd, scale, scores);
  };
  // The same for up to kMaxTile queries that see the same n keys.
  auto score_tile = [&](const float* const* q, const float* const* qs, int count, const E* keys, int n,
                        float* const* scores) {
    if constexpr (D == DType::bf16) {
      if (pairs) {
        score_keys_pairs_multi(qs, count, keys, n, hd, scale, scores);
        for (int u = 0; u < count; ++u)
          score_keys_tail<D>(q[u], keys, n / kPairKeysPerPass * kPairKeysPerPass, n, hd, scale, scores[u]);
        return;
      }
    }
    score_keys_tile<D>(q, count, keys, n, hd, scale, scores);
  };
  // acc (pair order when `pairs`) += the n values weighted by w; and for up to kMaxTile queries.
  auto add = [&](const float* w, const E* values, int n, float* acc) {
    if constexpr (D == DType::bf16) {
      if (pairs) return accumulate_values_pairs(w, values, n, hd, acc);
    }
    add_values<D>(w, values, n, hd, acc);
  };
  auto add_tile = [&](const float* const* w, const int* n, int count, const E* values, float* const* acc) {
    if constexpr (D == DType::bf16) {
      if (pairs) return add_values_pairs_tile(w, n, count, values, hd, acc);
    }
    add_values_tile<D>(w, n, count, values, hd, acc);
  };
  // i8: the n scores of keys from `slot` on in a head region times their rows' scales; a query's n softmax weights
  // times the value rows' scales (into its scratch, which it returns).
  auto scale_scores = [&](const E* region, int slot, float* scores, int n) {
    for (int j = 0; j < n; ++j) scores[j] *= kv_row_scale(region, bs, hd, slot + j);
  };
  auto scale_weights = [&](QueryState& q_st, const E* region, int slot, const float* w, int n) {
    for (int j = 0; j < n; ++j) q_st.scaled_weights[j] = w[j] * kv_row_scale(region, bs, hd, slot + j);
    return static_cast<const float*>(q_st.scaled_weights.data());
  };
  for (int span_begin = first / bs; span_begin * bs <= pos_last; span_begin += span_blocks) {
    const int span_first = std::max(first, span_begin * bs);  // its first key
    // The queries this span reaches (the earliest may end before it) and the keys each sees in it.
    int t0 = 0;
    while (pos0 + t0 < span_begin * bs) ++t0;
    const int span_end = std::min(span_begin + span_blocks, pos_last / bs + 1);  // blocks [span_begin, span_end)
    // Keys [jb, jb + n) of a block, their place in the span. Blocks are scattered, so the hardware prefetcher cannot
    // guess the next: the heads' rows of the block kPrefetchAhead blocks on are asked for while this one is worked
    // on. `then`: the first block the pass after this one reads (prefetched during this pass's last block), or null.
    // body(block, block's offset, its first key's slot, place in the span, next block's first head or null).
    auto for_each_block = [&](const E* cache, const E* then, auto&& body) {
      for (int block = span_begin; block < span_end; ++block) {
        if (prefetch && block + kPrefetchAhead < span_end) {
          const char* ahead = reinterpret_cast<const char*>(
              cache + p.block_table[block + kPrefetchAhead] * p.block_stride + kv_begin * p.head_stride);
          for (int64_t b = 0; b < prefetch_bytes; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
        }
        const int jb = std::max(first, block * bs);
        // Larger blocks: the next block's rows of the heads read, into L2 (the hardware prefetcher stops at the
        // end of this block, and the next one lies elsewhere).
        const E* next = prefetch                 ? nullptr
                        : block + 1 < span_end ? cache + p.block_table[block + 1] * p.block_stride + kv_begin * p.head_stride
                                               : then;
        body(block, p.block_table[block] * p.block_stride, jb - block * bs, jb - span_first, next);
      }
    };
    // The keys query t sees in `block`, from its first key's slot on (0 when the block is past it).
    auto keys_seen = [&](int t, int block, int slot) {
      return std::max(0, std::min(pos0 + t + 1, block * bs + bs) - (block * bs + slot));
    };
    const E* first_values = v_base + p.block_table[span_begin] * p.block_stride + kv_begin * p.head_stride;
    const E* next_keys = span_end * bs <= pos_last
                             ? k_base + p.block_table[span_end] * p.block_stride + kv_begin * p.head_stride
                             : nullptr;
    for_each_block(k_base, first_values, [&](int block, int64_t block_at, int slot, int at, const E* next) {
      for (int h = h_begin; h < h_end; ++h) {
        if (h % group == 0) prefetch_head(next, h);
        const E* region = k_base + block_at + static_cast<int64_t>(h / group) * p.head_stride;
        const E* keys = region + static_cast<int64_t>(slot) * hd;
        if (nq == 1) {  // a decode: straight to the kernels (small heads feel the tile's bookkeeping)
          const int n = keys_seen(0, block, slot);
          float* s_0 = st[0].head_scores.data() + static_cast<int64_t>(h - h_begin) * span + at;
          score(q0 + static_cast<int64_t>(h) * hd, pairs ? q_pairs(0, h) : nullptr, keys, n, s_0);
          if constexpr (kScaled) scale_scores(region, slot, s_0, n);
          continue;
        }
        const float* q[kMaxTile];
        const float* qs[kMaxTile];
        float* scores[kMaxTile];
        int whole = 0;  // the queries that see the whole block from slot on go first, together
        const int n_block = bs - slot;
        for (int t = t0; t < nq; ++t) {
          const int n = keys_seen(t, block, slot);
          float* s_t = st[t].head_scores.data() + static_cast<int64_t>(h - h_begin) * span + at;
          const float* q_t = q0 + t * q_stride + static_cast<int64_t>(h) * hd;
          const float* qs_t = pairs ? q_pairs(t, h) : nullptr;
          if (n == n_block) {
            q[whole] = q_t;
            qs[whole] = qs_t;
            scores[whole++] = s_t;
          } else if (n > 0) {
            score(q_t, qs_t, keys, n, s_t);
            if constexpr (kScaled) scale_scores(region, slot, s_t, n);
          }
        }
        if (whole > 0) score_tile(q, qs, whole, keys, n_block, scores);
        if constexpr (kScaled) {
          for (int u = 0; u < whole; ++u) scale_scores(region, slot, scores[u], n_block);
        }
      }
    });
    for (int t = t0; t < nq; ++t) {
      const int pos = pos0 + t;
      const int n_span = std::min(pos + 1, std::min(span_begin + span_blocks, pos / bs + 1) * bs) - span_first;
      for (int i = 0; i < heads; ++i) {
        if (p.logit_softcap > 0.0f) {  // Gemma 2: on the scores as scaled (masking is by span: no -inf here)
          float* s = st[t].head_scores.data() + static_cast<int64_t>(i) * span;
          const float cap = p.logit_softcap, inv = 1.0f / cap;
#pragma omp simd
          for (int j = 0; j < n_span; ++j) s[j] = softcap(s[j], cap, inv);
        }
        softmax_update(st[t].head_scores.data() + static_cast<int64_t>(i) * span, n_span, hd,
                       st[t].head_acc.data() + static_cast<int64_t>(i) * hd, st[t].head_max[i], st[t].head_denom[i]);
      }
    }
    for_each_block(v_base, next_keys, [&](int block, int64_t block_at, int slot, int at, const E* next) {
      for (int h = h_begin; h < h_end; ++h) {
        if (h % group == 0) prefetch_head(next, h);
        const int i = h - h_begin;
        const E* region = v_base + block_at + static_cast<int64_t>(h / group) * p.head_stride;
        if (nq == 1) {  // a decode: straight to the kernel
          const int n = keys_seen(0, block, slot);
          const float* w = st[0].head_scores.data() + static_cast<int64_t>(i) * span + at;
          if constexpr (kScaled) w = scale_weights(st[0], region, slot, w, n);
          add(w, region + static_cast<int64_t>(slot) * hd, n, st[0].head_acc.data() + static_cast<int64_t>(i) * hd);
          continue;
        }
        const float* weights[kMaxTile];
        float* accs[kMaxTile];
        int counts[kMaxTile];
        int seen = 0;
        for (int t = t0; t < nq; ++t) {
          const int n = keys_seen(t, block, slot);
          if (n == 0) continue;
          const float* w = st[t].head_scores.data() + static_cast<int64_t>(i) * span + at;
          if constexpr (kScaled) w = scale_weights(st[t], region, slot, w, n);
          weights[seen] = w;
          accs[seen] = st[t].head_acc.data() + static_cast<int64_t>(i) * hd;
          counts[seen++] = n;
        }
        add_tile(weights, counts, seen, region + static_cast<int64_t>(slot) * hd, accs);
      }
    });
  }
  for (int t = 0; t < nq; ++t) {
    for (int h = h_begin; h < h_end; ++h) {
      const int i = h - h_begin;
      const float inv = 1.0f / st[t].head_denom[i];
      const float* a = st[t].head_acc.data() + static_cast<int64_t>(i) * hd;
      float* out = out0 + t * q_stride + static_cast<int64_t>(h) * hd;
      if (pairs) {
        from_pair_order(a, hd, inv, out);
        continue;
      }
#pragma omp simd
      for (int d = 0; d < hd; ++d) out[d] = a[d] * inv;
    }
  }
}

void attend(const PagedAttentionParams& p, int h_begin, int h_end, int pos0, int nq, const float* q0, float* out0,
            int64_t q_stride, QueryState* st) {
  if (p.kv_dtype == DType::bf16) return attend<DType::bf16>(p, h_begin, h_end, pos0, nq, q0, out0, q_stride, st);
  if (p.kv_dtype == DType::f16) return attend<DType::f16>(p, h_begin, h_end, pos0, nq, q0, out0, q_stride, st);
  if (p.kv_dtype == DType::i8) return attend<DType::i8>(p, h_begin, h_end, pos0, nq, q0, out0, q_stride, st);
  attend<DType::f32>(p, h_begin, h_end, pos0, nq, q0, out0, q_stride, st);
}

}  // namespace

void paged_attention(const PagedAttentionParams& p) {
  const int q_row = p.n_heads * p.head_dim;
  const int head_end = p.head_end > 0 ? p.head_end : p.n_heads;
  thread_local QueryState st[kMaxTile];
  // Tiles of consecutive queries (one where a sliding window moves each query's first key), each with the heads asked
  // for: a query's arithmetic is the same alone (decode) and in a prefill chunk of any size or offset (batch
  // invariance).
  const int tile = p.sliding_window > 0 ? 1 : kMaxTile;
  for (int t = 0; t < p.n_tokens; t += tile) {
    const int64_t row = static_cast<int64_t>(t) * q_row;
    attend(p, p.head_begin, head_end, p.start_pos + t, std::min(tile, p.n_tokens - t), p.q + row, p.out + row, q_row,
           st);
  }
}

}  // namespace actord::cpu::ACTORD_ATTENTION_NS
