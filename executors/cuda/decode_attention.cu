// Attention of the tokens the prefill tiles do not take (launch_paged_attention in cuda_kernels.cuh): decodes and
// short chunks. One warp per (token, head) walks the token's keys with an online softmax, four keys' K and V rows
// loaded before the first is used. A decode the plan splits (step.splits: long contexts, and short ones while the
// step's decodes are too few to fill the GPU; executors/attention_plan.hpp) is cut into splits, a warp per (split,
// head) writing its running max, sum and accumulators, and a second kernel merges each token's splits (split-K):
// the keys of one decode are read by many warps at once instead of one after the other.
#include <cmath>

#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

namespace actord::cuda {

namespace {

constexpr int kMaxDimsPerLane = 8;  // head_dim up to 256
constexpr int kKeysInFlight = 4;
constexpr int kWarps = 4;

// One warp's query (pre-scaled, a value per lane and e) and its running softmax over keys.
template <class T>
struct WarpAttention {
  StepLayout step;  // copies: the compiler keeps the fields used in registers
  KvView kv;
  int seq, g, head_dim, lane;
  float qv[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  float m = -INFINITY, l = 0.0f;

  __device__ WarpAttention(const StepLayout& step_, const KvView& kv_, const float* q, int t, int h, int n_heads,
                           int n_kv_heads, int head_dim_, int lane_)
      : step(step_), kv(kv_), seq(step_.token_seq[t]), g(h / (n_heads / n_kv_heads)), head_dim(head_dim_),
        lane(lane_) {
    const float scale = rsqrtf(float(head_dim));
    const float* qh = q + (int64_t(t) * n_heads + h) * head_dim;
#pragma unroll
    for (int e = 0; e < kMaxDimsPerLane; ++e) {
      const int d = lane + 32 * e;
      qv[e] = d < head_dim ? qh[d] * scale : 0.0f;
      acc[e] = 0.0f;
    }
  }

  __device__ void load(int j, float* k_row, float* v_row) const {
    const T* kc = static_cast<const T*>(kv.k_base);
    const T* vc = static_cast<const T*>(kv.v_base);
    const int64_t at = kv_offset(step, kv, seq, j, g, head_dim);
#pragma unroll
    for (int e = 0; e < kMaxDimsPerLane; ++e) {
      const int d = lane + 32 * e;
      k_row[e] = d < head_dim ? to_f32(kc[at + d]) : 0.0f;
      v_row[e] = d < head_dim ? to_f32(vc[at + d]) : 0.0f;
    }
  }
  __device__ float score(const float* k_row) const {
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxDimsPerLane; ++e) {
      if (lane + 32 * e < head_dim) dot += qv[e] * k_row[e];
    }
    return warp_sum(dot);
  }
  // Key score s into the running max m, sum l and accumulators, its values v.
  __device__ void take(float s, const float* v) {
    const float m_new = fmaxf(m, s);
    const float correction = __expf(m - m_new), p = __expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int e = 0; e < kMaxDimsPerLane; ++e) {
      if (lane + 32 * e < head_dim) acc[e] = acc[e] * correction + p * v[e];
    }
    m = m_new;
  }
  // Keys lo .. hi in order, kKeysInFlight rows loaded before the first is used (a decode's keys are otherwise one
  // memory latency each): the same arithmetic in the same order as one key at a time.
  __device__ void attend(int lo, int hi) {
    int j = lo;
    for (; j + kKeysInFlight - 1 <= hi; j += kKeysInFlight) {
      float k_rows[kKeysInFlight][kMaxDimsPerLane], v_rows[kKeysInFlight][kMaxDimsPerLane], s[kKeysInFlight];
#pragma unroll
      for (int u = 0; u < kKeysInFlight; ++u) load(j + u, k_rows[u], v_rows[u]);
#pragma unroll
      for (int u = 0; u < kKeysInFlight; ++u) s[u] = score(k_rows[u]);
#pragma unroll
      for (int u = 0; u < kKeysInFlight; ++u) take(s[u], v_rows[u]);
    }
    for (; j <= hi; ++j) {
      float k_row[kMaxDimsPerLane], v_row[kMaxDimsPerLane];
      load(j, k_row, v_row);
      take(score(k_row), v_row);
    }
  }
};

__device__ __forceinline__ int first_key(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

template <class T>
__global__ void paged_attention_kernel(StepLayout step, const float* q, float* out, int n_heads, int n_kv_heads,
                                       int head_dim, int window, KvView kv, int skip_flags) {
  let_next_grid_start();  // the output product after it may start streaming its weights
  const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (pair >= int64_t(step.n) * n_heads) return;
  const int t = int(pair / n_heads), h = int(pair % n_heads);
  if (step.seq_tiled && (step.seq_tiled[step.token_seq[t]] & skip_flags)) return;  // the whole warp
  WarpAttention<T> a(step, kv, q, t, h, n_heads, n_kv_heads, head_dim, threadIdx.x & 31);
  const int pos = step.token_pos[t];
  a.attend(first_key(pos, window), pos);
  float* oh = out + (int64_t(t) * n_heads + h) * head_dim;
#pragma unroll
  for (int e = 0; e < kMaxDimsPerLane; ++e) {
    const int d = a.lane + 32 * e;
    if (d < head_dim) oh[d] = a.acc[e] / a.l;
  }
}

// partial [n_splits][n_heads][head_dim + 2]: a split's accumulators, then its running max and sum (-inf and 0 for a
// split with no keys: a window can leave the last splits of a token empty).
template <class T>
__global__ void split_attention_kernel(StepLayout step, const float* q, float* partial, int n_heads, int n_kv_heads,
                                       int head_dim, int window, KvView kv) {
  const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (pair >= int64_t(step.n_splits) * n_heads) return;
  const int item = int(pair / n_heads), h = int(pair % n_heads);
  const int t = step.splits[3 * item], split = step.splits[3 * item + 1], count = step.splits[3 * item + 2];
  WarpAttention<T> a(step, kv, q, t, h, n_heads, n_kv_heads, head_dim, threadIdx.x & 31);
  const int pos = step.token_pos[t], first = first_key(pos, window);
  const int per = (pos - first + 1 + count - 1) / count;
  const int lo = first + split * per, hi = min(pos, lo + per - 1);
  if (lo <= hi) a.attend(lo, hi);
  float* dst = partial + (int64_t(item) * n_heads + h) * (head_dim + 2);
#pragma unroll
  for (int e = 0; e < kMaxDimsPerLane; ++e) {
    const int d = a.lane + 32 * e;
    if (d < head_dim) dst[d] = a.acc[e];
  }
  if (a.lane == 0) {
    dst[head_dim] = a.m;
    dst[head_dim + 1] = a.l;
  }
}

// out of each split token = its splits merged: M = max m_i, L = sum l_i e^(m_i - M), out = sum acc_i e^(m_i - M) / L.
// A warp per (item, head), items that start a token (split 0) only.
__global__ void merge_splits_kernel(StepLayout step, const float* partial, float* out, int n_heads, int head_dim) {
  let_next_grid_start();  // the output product after it may start streaming its weights
  const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (pair >= int64_t(step.n_splits) * n_heads) return;
  const int item = int(pair / n_heads), h = int(pair % n_heads);
  if (step.splits[3 * item + 1] != 0) return;
  const int t = step.splits[3 * item], count = step.splits[3 * item + 2];
  const int lane = threadIdx.x & 31;
  const int stride = n_heads * (head_dim + 2);
  const float* first = partial + (int64_t(item) * n_heads + h) * (head_dim + 2);
  float big = -INFINITY;  // the lanes take the splits' maxima and sums a split each, then the warp combines them
  for (int i = lane; i < count; i += 32) big = fmaxf(big, first[int64_t(i) * stride + head_dim]);
  for (int o = 16; o > 0; o >>= 1) big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, o));
  float total = 0.0f;
  for (int i = lane; i < count; i += 32) {
    const float* part = first + int64_t(i) * stride;
    if (part[head_dim + 1] > 0.0f) total += part[head_dim + 1] * __expf(part[head_dim] - big);
  }
  total = warp_sum(total);
  float* oh = out + (int64_t(t) * n_heads + h) * head_dim;
  for (int d = lane; d < head_dim; d += 32) {
    float sum = 0.0f;
#pragma unroll 4
    for (int i = 0; i < count; ++i) {
      const float* part = first + int64_t(i) * stride;
      if (part[head_dim + 1] > 0.0f) sum += part[d] * __expf(part[head_dim] - big);
    }
    oh[d] = sum / total;
  }
}

}  // namespace

void launch_paged_attention(const StepLayout& step, const float* q, float* out, int n_heads, int n_kv_heads,
                            int head_dim, int window, const KvView& kv, int skip_flags, cudaStream_t stream) {
  const int64_t pairs = int64_t(step.n) * n_heads;
  if (pairs == 0) return;
  const unsigned grid = static_cast<unsigned>((pairs + kWarps - 1) / kWarps);
  with_element_type(kv.dtype, [&](auto zero) {
    using T = decltype(zero);
    paged_attention_kernel<T><<<grid, 32 * kWarps, 0, stream>>>(step, q, out, n_heads, n_kv_heads, head_dim, window,
                                                                 kv, skip_flags);
  });
}

void launch_split_attention(const StepLayout& step, const float* q, float* partial, float* out, int n_heads,
                            int n_kv_heads, int head_dim, int window, const KvView& kv, cudaStream_t stream) {
  const int64_t pairs = int64_t(step.n_splits) * n_heads;
  if (pairs == 0) return;
  const unsigned grid = static_cast<unsigned>((pairs + kWarps - 1) / kWarps);
  with_element_type(kv.dtype, [&](auto zero) {
    using T = decltype(zero);
    split_attention_kernel<T><<<grid, 32 * kWarps, 0, stream>>>(step, q, partial, n_heads, n_kv_heads, head_dim,
                                                                 window, kv);
  });
  merge_splits_kernel<<<grid, 32 * kWarps, 0, stream>>>(step, partial, out, n_heads, head_dim);
}

}  // namespace actord::cuda
