#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

namespace actord::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

template <class T>
__global__ void embed_kernel(StepLayout step, const T* table, int64_t vocab_first, int64_t rows, int h, float* out) {
  const int t = blockIdx.x;
  const int64_t id = step.tokens[t] - vocab_first;
  float* row = out + int64_t(t) * h;
  for (int c = threadIdx.x; c < h; c += blockDim.x) row[c] = (id >= 0 && id < rows) ? to_f32(table[id * h + c]) : 0.0f;
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int dim, float eps) {
  __shared__ float partial[32];
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / float(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

template <class T>
__global__ void round_kernel(const float* src, T* dst, size_t count) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) dst[i] = from_f32<T>(src[i]);
}

__global__ void add_bias_kernel(float* y, const float* bias, int n, int m) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size_t(n) * m) y[i] += bias[i % m];
}


__global__ void silu_mul_halves_kernel(const float* gu, float* y, int n, int64_t ff) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(n) * ff) return;
  const int64_t r = int64_t(i / ff), c = int64_t(i % ff);
  y[i] = silu(gu[r * 2 * ff + c]) * gu[r * 2 * ff + ff + c];
}

__global__ void gated_activation_kernel(int act, float* gate, const float* up, size_t count) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float g = gate[i];
  float a;
  if (act == 0) {
    a = silu(g);
  } else if (act == 1) {
    a = 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
  } else {
    a = 0.5f * g * (1.0f + erff(g * 0.70710678f));
  }
  gate[i] = a * up[i];
}

// (value, column) pairs of one row: b replaces a when a holds nothing yet (column < 0), or b's value is higher, or
// equal at a lower column; columns < 0 hold nothing.
__device__ __forceinline__ void keep_best(float& value, int& column, float other_value, int other_column) {
  if (other_column < 0) return;
  if (column < 0 || other_value > value || (other_value == value && other_column < column)) {
    value = other_value;
    column = other_column;
  }
}

__global__ void row_bests_kernel(const float* x, int width, int32_t first_id, RowBest* out) {
  __shared__ float values[32];
  __shared__ int columns[32];
  const float* row = x + int64_t(blockIdx.x) * width;
  float value = -INFINITY;
  int column = -1;
  for (int c = threadIdx.x; c < width; c += blockDim.x) {  // columns ascend: an equal value later never replaces
    const float v = row[c];
    if (!isnan(v) && (column < 0 || v > value)) {
      value = v;
      column = c;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_down_sync(0xffffffffu, value, offset);
    const int c = __shfl_down_sync(0xffffffffu, column, offset);
    keep_best(value, column, v, c);
  }
  if ((threadIdx.x & 31) == 0) {
    values[threadIdx.x >> 5] = value;
    columns[threadIdx.x >> 5] = column;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const bool held = threadIdx.x < (blockDim.x >> 5);
    value = held ? values[threadIdx.x] : -INFINITY;
    column = held ? columns[threadIdx.x] : -1;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_down_sync(0xffffffffu, value, offset);
      const int c = __shfl_down_sync(0xffffffffu, column, offset);
      keep_best(value, column, v, c);
    }
    if (threadIdx.x == 0) out[blockIdx.x] = column < 0 ? RowBest{-INFINITY, first_id} : RowBest{value, first_id + column};
  }
}

__global__ void add_kernel(float* x, const float* y, size_t count) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += y[i];
}

template <class T>
__global__ void rope_store_kv_kernel(StepLayout step, float* q, float* k, const float* v, int n_heads, int n_kv_heads,
                                     int head_dim, const float* inv_freq, KvView kv) {
  const int t = blockIdx.x;
  const int pos = step.token_pos[t], seq = step.token_seq[t];
  const int half = head_dim / 2;
  float* qt = q + int64_t(t) * n_heads * head_dim;
  float* kt = k + int64_t(t) * n_kv_heads * head_dim;
  const float* vt = v + int64_t(t) * n_kv_heads * head_dim;
  for (int j = threadIdx.x; j < (n_heads + n_kv_heads) * half; j += blockDim.x) {
    const int head = j / half, i = j % half;
    float* x = head < n_heads ? qt + head * head_dim : kt + (head - n_heads) * head_dim;
    float s, c;
    sincosf(float(pos) * inv_freq[i], &s, &c);
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
  __syncthreads();  // k rotated before it is stored
  T* kc = static_cast<T*>(kv.k_base);
  T* vc = static_cast<T*>(kv.v_base);
  for (int j = threadIdx.x; j < n_kv_heads * head_dim; j += blockDim.x) {
    const int g = j / head_dim, d = j % head_dim;
    const int64_t at = kv_offset(step, kv, seq, pos, g, head_dim) + d;
    kc[at] = from_f32<T>(kt[j]);
    vc[at] = from_f32<T>(vt[j]);
  }
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, int dim, float* dst) {
  const int i = blockIdx.x;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) dst[int64_t(i) * dim + c] = src[int64_t(rows[i]) * dim + c];
}

__global__ void scatter_add_rows_kernel(const float* src, const int32_t* rows, const float* weights, int n, int dim,
                                        float* dst) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  for (int i = 0; i < n; ++i) dst[int64_t(rows[i]) * dim + c] += weights[i] * src[int64_t(i) * dim + c];
}

__global__ void copy_columns_kernel(const float* src, int rows, int width, float* dst, int dst_stride, int col_offset) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * width) return;
  const size_t r = i / width, c = i % width;
  dst[r * dst_stride + col_offset + c] = src[i];
}

}  // namespace

void launch_embed(const StepLayout& step, const void* table, DType dtype, int64_t vocab_first, int64_t rows, int h,
                  float* out, cudaStream_t stream) {
  if (step.n == 0) return;
  with_element_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    embed_kernel<T><<<step.n, kThreads, 0, stream>>>(step, static_cast<const T*>(table), vocab_first, rows, h, out);
  });
}

void launch_rms_norm(const float* x, const float* w, float* y, int n, int dim, float eps, cudaStream_t stream) {
  if (n > 0) rms_norm_kernel<<<n, kThreads, 0, stream>>>(x, w, y, dim, eps);
}

void launch_round_to(const float* src, void* dst, DType dtype, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  with_element_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    round_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(src, static_cast<T*>(dst), count);
  });
}

void launch_add_bias(float* y, const float* bias, int n, int m, cudaStream_t stream) {
  if (n > 0 && m > 0) add_bias_kernel<<<blocks_for(size_t(n) * m), kThreads, 0, stream>>>(y, bias, n, m);
}

void launch_silu_mul_halves(const float* gu, float* y, int n, int64_t ff, cudaStream_t stream) {
  if (n > 0) silu_mul_halves_kernel<<<blocks_for(size_t(n) * ff), kThreads, 0, stream>>>(gu, y, n, ff);
}

void launch_gated_activation(int act, float* gate, const float* up, size_t count, cudaStream_t stream) {
  if (count > 0) gated_activation_kernel<<<blocks_for(count), kThreads, 0, stream>>>(act, gate, up, count);
}

void launch_add(float* x, const float* y, size_t count, cudaStream_t stream) {
  if (count > 0) add_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, y, count);
}

void launch_rope_store_kv(const StepLayout& step, float* q, float* k, const float* v, int n_heads, int n_kv_heads,
                          int head_dim, const float* inv_freq, const KvView& kv, cudaStream_t stream) {
  if (step.n == 0) return;
  with_element_type(kv.dtype, [&](auto zero) {
    using T = decltype(zero);
    rope_store_kv_kernel<T><<<step.n, 128, 0, stream>>>(step, q, k, v, n_heads, n_kv_heads, head_dim, inv_freq, kv);
  });
}

void launch_gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst, cudaStream_t stream) {
  if (n > 0) gather_rows_kernel<<<n, kThreads, 0, stream>>>(src, rows, dim, dst);
}

void launch_scatter_add_rows(const float* src, const int32_t* rows, const float* weights, int n, int dim, float* dst,
                             cudaStream_t stream) {
  if (n > 0) scatter_add_rows_kernel<<<blocks_for(size_t(dim)), kThreads, 0, stream>>>(src, rows, weights, n, dim, dst);
}

void launch_row_bests(const float* x, int rows, int width, int32_t first_id, RowBest* out, cudaStream_t stream) {
  if (rows > 0) row_bests_kernel<<<rows, kThreads, 0, stream>>>(x, width, first_id, out);
}

void launch_copy_columns(const float* src, int rows, int width, float* dst, int dst_stride, int col_offset,
                         cudaStream_t stream) {
  if (rows > 0 && width > 0) {
    copy_columns_kernel<<<blocks_for(size_t(rows) * width), kThreads, 0, stream>>>(src, rows, width, dst, dst_stride,
                                                                                     col_offset);
  }
}

}  // namespace actord::cuda
