#include "executors/cuda/long_prefill_attention.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "executors/cuda/device_memory.hpp"
#include "executors/cuda/device_util.cuh"

namespace actord::cuda {

namespace {

// keys / values [n_kv][ctx][hd] (type T, as cached) = the sequence's cached rows at positions 0 .. ctx - 1.
template <class T>
__global__ void gather_kv_kernel(StepLayout step, KvView kv, int seq, int ctx, int hd, T* keys, T* values) {
  const int pos = blockIdx.x, g = blockIdx.y;
  const int64_t at = kv_offset(step, kv, seq, pos, g, hd);
  const T* kc = static_cast<const T*>(kv.k_base);
  const T* vc = static_cast<const T*>(kv.v_base);
  T* kd = keys + (int64_t(g) * ctx + pos) * hd;
  T* vd = values + (int64_t(g) * ctx + pos) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    kd[d] = kc[at + d];
    vd[d] = vc[at + d];
  }
}

// qb [n_heads][qn][hd] = q rows t .. t + qn - 1 (q [tokens][n_heads][hd] f32) times scale, rounded to T. Head h of
// KV head j = h / g sits at rows (h * qn ..): a KV head's g query heads are g * qn contiguous rows.
template <class T>
__global__ void heads_first_kernel(const float* q, int t, int n_heads, int hd, int qn, float scale, T* qb) {
  const int i = blockIdx.x, h = blockIdx.y;
  const float* src = q + (int64_t(t + i) * n_heads + h) * hd;
  T* dst = qb + (int64_t(h) * qn + i) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = from_f32<T>(src[d] * scale);
}

// Row r = h * qn + i of s [n_heads * qn][ctx] (query i at position first_pos + i) -> p, the same shape in T: the
// softmax over keys lo .. first_pos + i (lo = 0, or the window's first), zero elsewhere. One block per row.
template <class T>
__global__ void masked_softmax_kernel(const float* s, T* p, int qn, int ctx, int first_pos, int window) {
  __shared__ float partial[32];
  const int64_t r = blockIdx.x;
  const int i = int(r % qn);
  const int hi = first_pos + i, lo = window > 0 ? max(0, hi - window + 1) : 0;
  const float* row = s + r * ctx;
  T* out = p + r * ctx;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;

  float m = -INFINITY;
  for (int k = lo + threadIdx.x; k <= hi; k += blockDim.x) m = fmaxf(m, row[k]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();  // partial is reused for the sum

  float sum = 0.0f;
  for (int k = lo + threadIdx.x; k <= hi; k += blockDim.x) sum += expf(row[k] - m);
  sum = warp_sum(sum);
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < warps; ++w) sum += partial[w];
  const float inv = 1.0f / sum;

  for (int k = threadIdx.x; k < ctx; k += blockDim.x) {
    out[k] = from_f32<T>(k >= lo && k <= hi ? expf(row[k] - m) * inv : 0.0f);
  }
}

// out rows t .. t + qn - 1 ([tokens][n_heads][hd]) = o [n_heads][qn][hd].
__global__ void tokens_first_kernel(const float* o, int t, int n_heads, int hd, int qn, float* out) {
  const int i = blockIdx.x, h = blockIdx.y;
  const float* src = o + (int64_t(h) * qn + i) * hd;
  float* dst = out + (int64_t(t + i) * n_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = src[d];
}

// out[0] = max |a - b|, out[1] = max |b| over the rows (non-negative floats order as their bit patterns).
__global__ void max_difference_kernel(const float* a, const float* b, int64_t first, int64_t count,
                                      unsigned* out) {
  float diff = 0.0f, mag = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = a[first + i], y = b[first + i];
    const float d = fabsf(x - y);
    diff = fmaxf(diff, d != d ? INFINITY : d);  // NaN: the largest difference
    mag = fmaxf(mag, fabsf(y));
  }
  for (int o = 16; o > 0; o >>= 1) {
    diff = fmaxf(diff, __shfl_xor_sync(0xffffffffu, diff, o));
    mag = fmaxf(mag, __shfl_xor_sync(0xffffffffu, mag, o));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(out, __float_as_uint(diff));
    atomicMax(out + 1, __float_as_uint(mag));
  }
}

cudaDataType_t cuda_type_of(DType dtype) { return dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

void* scratch_of(std::shared_ptr<void>& memory, size_t& have, size_t bytes) {
  reserve_bytes(memory, have, bytes);
  return memory.get();
}

}  // namespace

bool LongPrefillAttention::fits(DType kv_dtype, int head_dim) {
  return (kv_dtype == DType::bf16 || kv_dtype == DType::f16) && head_dim % 8 == 0 && head_dim <= 256;
}

void LongPrefillAttention::run(cublasHandle_t blas, cudaStream_t stream, const StepLayout& step, int seq, int t0,
                               int count, int p0, const float* q, float* out, int n_heads, int n_kv_heads,
                               int head_dim, int window, const KvView& kv) {
  const int hd = head_dim, g = n_heads / n_kv_heads;
  const int ctx = p0 + count;  // every key the sequence's last query sees
  const size_t esize = dtype_size(kv.dtype);
  const cudaDataType_t type = cuda_type_of(kv.dtype);
  const unsigned threads = static_cast<unsigned>(std::min(256, std::max(32, hd)));

  auto* keys = static_cast<unsigned char*>(scratch_of(kv_, kv_bytes_, 2 * size_t(n_kv_heads) * ctx * hd * esize));
  void* values = keys + size_t(n_kv_heads) * ctx * hd * esize;
  with_element_type(kv.dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, float>) {
      gather_kv_kernel<T><<<dim3(unsigned(ctx), unsigned(n_kv_heads)), threads, 0, stream>>>(
          step, kv, seq, ctx, hd, reinterpret_cast<T*>(keys), static_cast<T*>(values));
    }
  });

  // Queries in chunks whose S and P fit the scratch cap (at least 16 queries).
  const size_t per_query = size_t(n_heads) * size_t(ctx) * (sizeof(float) + esize);
  const int chunk = std::clamp<int>(int(kScratchBytes / per_query), 16, count);
  const float scale = 1.0f / std::sqrt(float(hd));
  const float one = 1.0f, none = 0.0f;
  for (int i0 = 0; i0 < count; i0 += chunk) {
    const int qn = std::min(chunk, count - i0);
    const int ctx_c = p0 + i0 + qn;  // keys this chunk's last query sees
    void* qb = scratch_of(q_, q_bytes_, size_t(n_heads) * qn * hd * esize);
    auto* s = static_cast<float*>(scratch_of(s_, s_bytes_, size_t(n_heads) * qn * ctx_c * sizeof(float)));
    void* p = scratch_of(p_, p_bytes_, size_t(n_heads) * qn * ctx_c * esize);
    auto* o = static_cast<float*>(scratch_of(o_, o_bytes_, size_t(n_heads) * qn * hd * sizeof(float)));
    with_element_type(kv.dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_same_v<T, float>) {
        heads_first_kernel<T><<<dim3(unsigned(qn), unsigned(n_heads)), threads, 0, stream>>>(
            q, t0 + i0, n_heads, hd, qn, scale, static_cast<T*>(qb));
      }
    });
    // S_j [g qn][ctx_c] = Q_j K_j^T per KV head j; column-major: S_j^T (ctx_c x g qn) = K_j^T Q_j^T with K_j
    // [ctx][hd] row-major (= hd x ctx column-major, transposed) and Q_j [g qn][hd] (= hd x g qn column-major).
    ACTORD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas, CUBLAS_OP_T, CUBLAS_OP_N, ctx_c, g * qn, hd, &one, keys, type, hd, int64_t(ctx) * hd, qb, type, hd,
        int64_t(g) * qn * hd, &none, s, CUDA_R_32F, ctx_c, int64_t(g) * qn * ctx_c, n_kv_heads, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
    with_element_type(kv.dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_same_v<T, float>) {
        masked_softmax_kernel<T><<<unsigned(n_heads * qn), 256, 0, stream>>>(s, static_cast<T*>(p), qn, ctx_c,
                                                                              p0 + i0, window);
      }
    });
    // O_j [g qn][hd] = P_j V_j; column-major: O_j^T (hd x g qn) = V_j^T P_j^T with V_j [ctx][hd] (= hd x ctx) and
    // P_j [g qn][ctx_c] (= ctx_c x g qn).
    ACTORD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, g * qn, ctx_c, &one, values, type, hd, int64_t(ctx) * hd, p, type, ctx_c,
        int64_t(g) * qn * ctx_c, &none, o, CUDA_R_32F, hd, int64_t(g) * qn * hd, n_kv_heads, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
    tokens_first_kernel<<<dim3(unsigned(qn), unsigned(n_heads)), threads, 0, stream>>>(o, t0 + i0, n_heads, hd, qn,
                                                                                      out);
  }
}

void max_difference(const float* a, const float* b, int first, int rows, int width, float* host_out2,
                    cudaStream_t stream) {
  unsigned* d = nullptr;
  ACTORD_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), 2 * sizeof(unsigned), stream));
  ACTORD_CUDA_CHECK(cudaMemsetAsync(d, 0, 2 * sizeof(unsigned), stream));
  max_difference_kernel<<<128, 256, 0, stream>>>(a, b, int64_t(first) * width, int64_t(rows) * width, d);
  unsigned bits[2] = {0, 0};
  ACTORD_CUDA_CHECK(cudaMemcpyAsync(bits, d, sizeof bits, cudaMemcpyDeviceToHost, stream));
  ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream));
  ACTORD_CUDA_CHECK(cudaFreeAsync(d, stream));
  std::memcpy(host_out2, bits, sizeof bits);
}

}  // namespace actord::cuda
