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

#include "executors/cpu/attention_kernels.inl"

// scores[j] = q . k_j * scale for the n keys of one head in one block: 16 (AVX-512) or 8 (AVX2) keys per pass when
// head_dim allows, otherwise four independent dot products per pass, bf16/f16 K converted in registers.
template <DType D>
void score_keys_tail(const float* q, const typename Kv<D>::Elem* keys, int j, int n, int hd, float scale,
                     float* scores);

// Up to kMaxTile queries' scores of a block's n keys through row reader R (head_dim a multiple of R::kElems): the
// vector passes take the queries in R's order (qr), the keys past them the same queries in natural order (q).
template <class R, DType D>
[[gnu::always_inline]] inline void score_keys_in(const float* const* qr, const float* const* q, int nq,
                                                 const typename Kv<D>::Elem* keys, int n, int hd, float scale,
                                                 float* const* scores) {
  score_key_passes<R>(qr, nq, keys, n, hd, scale, scores);
  for (int t = 0; t < nq; ++t) score_keys_tail<D>(q[t], keys, n / kKeysPerPass * kKeysPerPass, n, hd, scale, scores[t]);
}

template <DType D>
[[gnu::always_inline]] inline void score_keys(const float* q, const typename Kv<D>::Elem* keys, int n, int hd,
                                              float scale, float* scores) {
  int j = 0;
#if defined(__AVX2__)
  if (hd % Natural<D>::kElems == 0) return score_keys_in<Natural<D>, D>(&q, &q, 1, keys, n, hd, scale, &scores);
#endif
#if defined(__AVX512F__)
  if (hd == 8) {
    for (; j + 16 <= n; j += 16) score_16_keys_hd8<D>(q, keys + static_cast<int64_t>(j) * hd, scale, scores + j);
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
  if (hd % 16 == 0) return add_values_in<Natural<D>>(&w, &n, 1, values, hd, &acc);
  if (hd == 8) return accumulate_values_hd8<D>(w, values, n, acc);
#elif defined(__AVX2__)
  if (hd == 8) {  // one chunk: the keys spread over four accumulators so the FMAs do not wait on each other
    __m256 a[4] = {_mm256_loadu_ps(acc), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      for (int u = 0; u < 4; ++u) a[u] = _mm256_fmadd_ps(_mm256_set1_ps(w[j + u]), load8<D>(values + (j + u) * 8), a[u]);
    }
    for (; j < n; ++j) a[0] = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), load8<D>(values + j * 8), a[0]);
    _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
    return;
  }
  if (hd % 8 == 0) return add_values_in<Natural<D>>(&w, &n, 1, values, hd, &acc);
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
  if (hd % 16 == 0) return score_keys_in<Natural<D>, D>(q, q, nq, keys, n, hd, scale, scores);
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
  if (hd % 16 == 0) return add_values_in<Natural<D>>(w, n, nq, values, hd, acc);
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
  // Up to kMaxTile queries' scores of the same n keys (q in natural order; qs the same in pair order, when `pairs`).
  auto score_tile = [&](const float* const* q, const float* const* qs, int count, const E* keys, int n,
                        float* const* scores) {
    if constexpr (D == DType::bf16 && kPairElems > 0) {
      if (pairs) return score_keys_in<Bf16Pairs, D>(qs, q, count, keys, n, hd, scale, scores);
    }
    score_keys_tile<D>(q, count, keys, n, hd, scale, scores);
  };
  auto score = [&](const float* q, const float* qs, const E* keys, int n, float* scores) {
    if (pairs) return score_tile(&q, &qs, 1, keys, n, &scores);
    score_keys<D>(q, keys, n, hd, scale, scores);
  };
  // acc (pair order when `pairs`) += the n values weighted by w; and for up to kMaxTile queries.
  auto add_tile = [&](const float* const* w, const int* n, int count, const E* values, float* const* acc) {
    if constexpr (D == DType::bf16 && kPairElems > 0) {
      if (pairs) return add_values_in<Bf16Pairs>(w, n, count, values, hd, acc);
    }
    add_values_tile<D>(w, n, count, values, hd, acc);
  };
  auto add = [&](const float* w, const E* values, int n, float* acc) {
    if (pairs) return add_tile(&w, &n, 1, values, &acc);
    add_values<D>(w, values, n, hd, acc);
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
    // body(block, block's offset, its first key's slot, place in the span, next block's first head or null). Always
    // inlined: outlined, every variable it captures is read through memory in the key loop.
    auto for_each_block = [&](const E* cache, const E* then, auto&& body) __attribute__((always_inline)) {
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
