// Causal attention of prefill tiles (launch_prefill_attention in cuda_kernels.cuh): one block per (tile of up to
// kPrefillTileQueries consecutive queries of one sequence, head). The tile's queries sit in shared memory; keys and
// values stream through shared memory kKeysPerPass at a time (converted to f32 from the cache's dtype), scores are
// computed for the whole tile at once, and an online softmax (running max and sum per query) rescales the output
// accumulators held in registers. Each key is read once per tile instead of once per query, as the warp-per-query
// kernel does. f32 arithmetic throughout, head_dim 64 or 128.
#include <cmath>

#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

namespace actord::cuda {

namespace {

constexpr int kQ = kPrefillTileQueries;  // queries of a tile (32)
constexpr int kK = 32;                   // keys of a pass
constexpr int kThreads = 128;
static_assert(kQ == 32 && kK == 32 && kThreads == 128, "the thread mappings below assume these");

// Shared memory: Q [kQ][HD + 1], K [kK][HD + 1], V [kK][HD], S [kQ][kK + 1], then per query m, l and alpha.
template <int HD>
constexpr size_t shared_bytes() {
  return sizeof(float) * (size_t(kQ) * (HD + 1) + size_t(kK) * (HD + 1) + size_t(kK) * HD + size_t(kQ) * (kK + 1) +
                          3 * size_t(kQ));
}

template <class T, int HD>
__global__ void __launch_bounds__(kThreads) prefill_attention_kernel(StepLayout step, const float* __restrict__ q,
                                                                     float* __restrict__ out, int n_heads,
                                                                     int n_kv_heads, int window, KvView kv) {
  extern __shared__ float smem[];
  float* sq = smem;                       // [kQ][HD + 1], pre-scaled by 1/sqrt(HD)
  float* sk = sq + kQ * (HD + 1);         // [kK][HD + 1]
  float* sv = sk + kK * (HD + 1);         // [kK][HD]
  float* ss = sv + kK * HD;               // [kQ][kK + 1]: scores, then probabilities
  float* sm = ss + kQ * (kK + 1);         // running max per query
  float* sl = sm + kQ;                    // running sum per query
  float* salpha = sl + kQ;                // this pass's rescale of the accumulators per query

  const int tid = threadIdx.x;
  const int32_t* tile = step.tiles + 3 * blockIdx.x;
  const int t0 = tile[0], count = tile[1], seq = tile[2];
  const int h = blockIdx.y;
  const int g = h / (n_heads / n_kv_heads);
  const int p0 = step.token_pos[t0];
  const int p_last = p0 + count - 1;
  const float scale = rsqrtf(float(HD));

  for (int i = tid; i < kQ * HD; i += kThreads) {
    const int qi = i / HD, d = i % HD;
    sq[qi * (HD + 1) + d] = qi < count ? q[(int64_t(t0 + qi) * n_heads + h) * HD + d] * scale : 0.0f;
  }
  if (tid < kQ) {
    sm[tid] = -INFINITY;
    sl[tid] = 0.0f;
  }

  // Scores: thread -> queries {a, a + 16}, keys {b, b + 8, b + 16, b + 24}.
  const int a = tid / 8, b = tid % 8;
  // Output: thread -> queries {a, a + 16}, dims {b + 8 i}.
  constexpr int kDims = HD / 8;
  float acc[2][kDims];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[r][i] = 0.0f;

  const T* kc = static_cast<const T*>(kv.k_base);
  const T* vc = static_cast<const T*>(kv.v_base);
  const int first_key = window > 0 ? max(0, p0 - window + 1) : 0;
  for (int kb = first_key; kb <= p_last; kb += kK) {
    __syncthreads();  // the previous pass is done with sk, sv and ss (and sq / sm / sl are written, first time)
    for (int i = tid; i < kK * HD; i += kThreads) {
      const int kj = i / HD, d = i % HD;
      const int pos = kb + kj;
      float kval = 0.0f, vval = 0.0f;
      if (pos <= p_last) {
        const int64_t at = kv_offset(step, kv, seq, pos, g, HD) + d;
        kval = to_f32(kc[at]);
        vval = to_f32(vc[at]);
      }
      sk[kj * (HD + 1) + d] = kval;
      sv[kj * HD + d] = vval;
    }
    __syncthreads();

    float s[2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[r][j] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < HD; ++d) {
      const float q0 = sq[a * (HD + 1) + d], q1 = sq[(a + 16) * (HD + 1) + d];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float kval = sk[(b + 8 * j) * (HD + 1) + d];
        s[0][j] = fmaf(q0, kval, s[0][j]);
        s[1][j] = fmaf(q1, kval, s[1][j]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int qi = a + 16 * r;
      const int qpos = p0 + qi;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kpos = kb + b + 8 * j;
        const bool visible = qi < count && kpos <= qpos && (window <= 0 || kpos > qpos - window);
        ss[qi * (kK + 1) + b + 8 * j] = visible ? s[r][j] : -INFINITY;
      }
    }
    __syncthreads();

    // Online softmax: warp w takes queries 8w .. 8w + 7, a key per lane.
    {
      const int warp = tid / 32, lane = tid % 32;
      for (int qi = warp * 8; qi < warp * 8 + 8; ++qi) {
        const float v = ss[qi * (kK + 1) + lane];
        float mx = v;
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_old = sm[qi];
        const float m_new = fmaxf(m_old, mx);
        const float p = m_new == -INFINITY ? 0.0f : __expf(v - m_new);
        const float sum = warp_sum(p);
        ss[qi * (kK + 1) + lane] = p;
        __syncwarp();
        if (lane == 0) {
          const float alpha = m_new == -INFINITY ? 1.0f : __expf(m_old - m_new);
          salpha[qi] = alpha;
          sl[qi] = sl[qi] * alpha + sum;
          sm[qi] = m_new;
        }
      }
    }
    __syncthreads();

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float alpha = salpha[a + 16 * r];
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[r][i] *= alpha;
    }
    for (int j = 0; j < kK; ++j) {
      const float p0v = ss[a * (kK + 1) + j], p1v = ss[(a + 16) * (kK + 1) + j];
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const float v = sv[j * HD + b + 8 * i];
        acc[0][i] = fmaf(p0v, v, acc[0][i]);
        acc[1][i] = fmaf(p1v, v, acc[1][i]);
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = a + 16 * r;
    if (qi >= count) continue;
    const float inv = 1.0f / sl[qi];
    float* o = out + (int64_t(t0 + qi) * n_heads + h) * HD;
#pragma unroll
    for (int i = 0; i < kDims; ++i) o[b + 8 * i] = acc[r][i] * inv;
  }
}

template <class T, int HD>
void launch_typed(const StepLayout& step, const float* q, float* out, int n_heads, int n_kv_heads, int window,
                  const KvView& kv, cudaStream_t stream) {
  constexpr size_t bytes = shared_bytes<HD>();  // over the 48 KB default for head_dim 128: raised on this device
  cudaFuncSetAttribute(prefill_attention_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  const dim3 grid(static_cast<unsigned>(step.n_tiles), static_cast<unsigned>(n_heads));
  prefill_attention_kernel<T, HD><<<grid, kThreads, bytes, stream>>>(step, q, out, n_heads, n_kv_heads, window, kv);
}

}  // namespace

bool prefill_attention_fits(int head_dim) { return head_dim == 64 || head_dim == 128; }

void launch_prefill_attention(const StepLayout& step, const float* q, float* out, int n_heads, int n_kv_heads,
                              int head_dim, int window, const KvView& kv, cudaStream_t stream) {
  if (step.n_tiles == 0 || n_heads == 0 || !prefill_attention_fits(head_dim)) return;
  with_element_type(kv.dtype, [&](auto zero) {
    using T = decltype(zero);
    if (head_dim == 64) {
      launch_typed<T, 64>(step, q, out, n_heads, n_kv_heads, window, kv, stream);
    } else {
      launch_typed<T, 128>(step, q, out, n_heads, n_kv_heads, window, kv, stream);
    }
  });
}

}  // namespace actord::cuda
