#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace actord::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRowBestChunk = 4096;  // columns per block of row_bests (a row's chunks run in parallel)

unsigned blocks_for(size_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

template <class T>
__global__ void embed_kernel(StepLayout step, const RowBest* picks, const T* table, int64_t vocab_first, int64_t rows,
                             int h, float* out) {
  const int t = blockIdx.x;
  const int32_t token = step.tokens[t];
  const int64_t id = int64_t(token < 0 ? picks[-1 - token].id : token) - vocab_first;
  float* row = out + int64_t(t) * h;
  for (int c = threadIdx.x; c < h; c += blockDim.x) row[c] = (id >= 0 && id < rows) ? to_f32(table[id * h + c]) : 0.0f;
}

// The sum of v over the block's threads (whole warps), on every thread.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float total = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    total = warp_sum(total);
    if (threadIdx.x == 0) partial[0] = total;
  }
  __syncthreads();
  return partial[0];
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int dim, float eps) {
  let_next_grid_start();  // the product after it may start streaming its weights
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  const float scale = rsqrtf(block_sum(ss) / float(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

// The same for rows of dim = 4 k, k <= kNormThreads * kNormVectors: each thread holds its float4s of the row in
// registers (x read once, all its loads in flight together: a decode's one row is a single memory latency).
constexpr int kNormThreads = 256, kNormVectors = 8;
__global__ void __launch_bounds__(kNormThreads) rms_norm_vec4_kernel(const float* x, const float* w, float* y, int dim,
                                                                   float eps) {
  let_next_grid_start();  // the product after it may start streaming its weights
  const int vectors = dim / 4;
  const auto* xr = reinterpret_cast<const float4*>(x + int64_t(blockIdx.x) * dim);
  auto* yr = reinterpret_cast<float4*>(y + int64_t(blockIdx.x) * dim);
  const auto* wv = reinterpret_cast<const float4*>(w);
  float4 v[kNormVectors];
  float ss = 0.0f;
#pragma unroll
  for (int u = 0; u < kNormVectors; ++u) {
    const int i = threadIdx.x + u * blockDim.x;
    v[u] = i < vectors ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int u = 0; u < kNormVectors; ++u) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
  const float scale = rsqrtf(block_sum(ss) / float(dim) + eps);
#pragma unroll
  for (int u = 0; u < kNormVectors; ++u) {
    const int i = threadIdx.x + u * blockDim.x;
    if (i < vectors) {
      const float4 g = wv[i];
      yr[i] = make_float4(v[u].x * scale * g.x, v[u].y * scale * g.y, v[u].z * scale * g.z, v[u].w * scale * g.w);
    }
  }
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

// The best (value, column) of columns [first, end) of a row among the block's threads; column -1 when none.
__device__ void block_best(const float* row, int first, int end, float& value, int& column) {
  __shared__ float values[32];
  __shared__ int columns[32];
  value = -INFINITY;
  column = -1;
  for (int c = first + threadIdx.x; c < end; c += blockDim.x) {  // columns ascend: an equal value later never replaces
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
  }
}

// partial[row][chunk] = the best of the chunk's columns (id: its column, -1 for none); grid (chunks, rows).
__global__ void row_chunk_bests_kernel(const float* x, int width, int per_chunk, RowBest* partial) {
  const float* row = x + int64_t(blockIdx.y) * width;
  const int first = blockIdx.x * per_chunk, end = min(width, first + per_chunk);
  float value;
  int column;
  block_best(row, first, end, value, column);
  if (threadIdx.x == 0) partial[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = RowBest{value, column};
}

// out[row] from its chunks' bests, a warp per row (chunks <= 32 a lane at a time in order).
__global__ void merge_row_bests_kernel(const RowBest* partial, int rows, int chunks, int32_t first_id, RowBest* out) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= rows) return;
  float value = -INFINITY;
  int column = -1;
  for (int c = lane; c < chunks; c += 32) {
    const RowBest b = partial[int64_t(row) * chunks + c];
    keep_best(value, column, b.logit, b.id);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_down_sync(0xffffffffu, value, offset);
    const int c = __shfl_down_sync(0xffffffffu, column, offset);
    keep_best(value, column, v, c);
  }
  if (lane == 0) out[row] = column < 0 ? RowBest{-INFINITY, first_id} : RowBest{value, first_id + column};
}

__global__ void add_kernel(float* x, const float* y, size_t count) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += y[i];
}

__global__ void scale_kernel(float* x, float factor, size_t count) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] *= factor;
}

__global__ void softcap_kernel(float* x, float cap, size_t count) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] = cap * tanhf(x[i] / cap);
}

// A thread per (token, head, i < head_dim / 2): with i < rotary_dim / 2 it rotates q's and k's pair (i, i + r) (r =
// rotary_dim / 2); past that (partial rotary) its pair is elements rotary_dim + 2 (i - r) and the next, unrotated. A
// K head's thread also stores its two keys and the values i and i + head_dim / 2 in the cache (a decode's heads
// spread over the GPU, not one block).
template <class T>
__global__ void rope_store_kv_kernel(StepLayout step, float* q, float* k, const float* v, int n_heads, int n_kv_heads,
                                     int head_dim, int rotary_dim, float rotary_scale, const float* inv_freq,
                                     KvView kv) {
  const int half = head_dim / 2, r = rotary_dim / 2, heads = n_heads + n_kv_heads;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= int64_t(step.n) * heads * half) return;
  const int t = int(j / (int64_t(heads) * half)), head = int(j / half % heads), i = int(j % half);
  const int pos = step.token_pos[t];
  const bool is_q = head < n_heads;
  float* x = is_q ? q + (int64_t(t) * n_heads + head) * head_dim
                  : k + (int64_t(t) * n_kv_heads + (head - n_heads)) * head_dim;
  const bool rotates = i < r;
  const int ia = rotates ? i : rotary_dim + 2 * (i - r), ib = rotates ? i + r : ia + 1;
  float ra = x[ia], rb = x[ib];
  if (rotates) {
    float s, c;
    sincosf(float(pos) * inv_freq[i], &s, &c);
    s *= rotary_scale;
    c *= rotary_scale;
    const float a = ra, b = rb;
    ra = a * c - b * s;
    rb = b * c + a * s;
    x[ia] = ra;
    x[ib] = rb;
  }
  if (is_q) return;
  const int g = head - n_heads;
  const int64_t at = kv_offset(step, kv, step.token_seq[t], pos, g, head_dim);
  const float* vh = v + (int64_t(t) * n_kv_heads + g) * head_dim;
  T* kc = static_cast<T*>(kv.k_base);
  T* vc = static_cast<T*>(kv.v_base);
  kc[at + ia] = from_f32<T>(ra);
  kc[at + ib] = from_f32<T>(rb);
  vc[at + i] = from_f32<T>(vh[i]);
  vc[at + i + half] = from_f32<T>(vh[i + half]);
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, int dim, float* dst) {
  let_next_grid_start();
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

void launch_embed(const StepLayout& step, const RowBest* picks, const void* table, DType dtype, int64_t vocab_first,
                  int64_t rows, int h, float* out, cudaStream_t stream) {
  if (step.n == 0) return;
  with_element_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    embed_kernel<T><<<step.n, kThreads, 0, stream>>>(step, picks, static_cast<const T*>(table), vocab_first, rows, h,
                                                     out);
  });
}

void launch_rms_norm(const float* x, const float* w, float* y, int n, int dim, float eps, cudaStream_t stream) {
  if (n <= 0) return;
  const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
                        reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  if (aligned && dim % 4 == 0 && dim <= 4 * kNormThreads * kNormVectors) {
    // Threads: enough for the row's float4s in kNormVectors rounds, whole warps, at most kNormThreads.
    const int vectors = dim / 4;
    const int threads = std::min(kNormThreads, ((vectors + kNormVectors - 1) / kNormVectors + 31) / 32 * 32);
    rms_norm_vec4_kernel<<<n, threads, 0, stream>>>(x, w, y, dim, eps);
    return;
  }
  rms_norm_kernel<<<n, kThreads, 0, stream>>>(x, w, y, dim, eps);
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

void launch_scale(float* x, float factor, size_t count, cudaStream_t stream) {
  if (count > 0) scale_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, factor, count);
}

void launch_softcap(float* x, float cap, size_t count, cudaStream_t stream) {
  if (count > 0) softcap_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, cap, count);
}

void launch_rope_store_kv(const StepLayout& step, float* q, float* k, const float* v, int n_heads, int n_kv_heads,
                          int head_dim, int rotary_dim, float rotary_scale, const float* inv_freq, const KvView& kv,
                          cudaStream_t stream) {
  if (step.n == 0) return;
  with_element_type(kv.dtype, [&](auto zero) {
    using T = decltype(zero);
    const size_t pairs = size_t(step.n) * size_t(n_heads + n_kv_heads) * size_t(head_dim / 2);
    if (pairs == 0) return;
    rope_store_kv_kernel<T><<<blocks_for(pairs), kThreads, 0, stream>>>(step, q, k, v, n_heads, n_kv_heads, head_dim,
                                                                       rotary_dim, rotary_scale, inv_freq, kv);
  });
}

void launch_gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst, cudaStream_t stream) {
  if (n > 0) gather_rows_kernel<<<n, kThreads, 0, stream>>>(src, rows, dim, dst);
}

void launch_scatter_add_rows(const float* src, const int32_t* rows, const float* weights, int n, int dim, float* dst,
                             cudaStream_t stream) {
  if (n > 0) scatter_add_rows_kernel<<<blocks_for(size_t(dim)), kThreads, 0, stream>>>(src, rows, weights, n, dim, dst);
}

int row_best_chunks(int width) { return std::clamp((width + kRowBestChunk - 1) / kRowBestChunk, 1, 64); }

void launch_row_bests(const float* x, int rows, int width, int32_t first_id, RowBest* partial, RowBest* out,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  const int chunks = row_best_chunks(width);
  const int per_chunk = (width + chunks - 1) / chunks;
  row_chunk_bests_kernel<<<dim3(unsigned(chunks), unsigned(rows)), kThreads, 0, stream>>>(x, width, per_chunk,
                                                                                         partial);
  merge_row_bests_kernel<<<unsigned((rows + 7) / 8), 256, 0, stream>>>(partial, rows, chunks, first_id, out);
}

namespace {
__global__ void tokens_to_picks_kernel(const int32_t* tokens, int rows, RowBest* picks) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) picks[r] = RowBest{0.0f, tokens[r]};
}
}  // namespace

void launch_tokens_to_picks(const int32_t* tokens, int rows, RowBest* picks, cudaStream_t stream) {
  if (rows > 0) tokens_to_picks_kernel<<<unsigned((rows + 255) / 256), 256, 0, stream>>>(tokens, rows, picks);
}

void launch_copy_columns(const float* src, int rows, int width, float* dst, int dst_stride, int col_offset,
                         cudaStream_t stream) {
  if (rows > 0 && width > 0) {
    copy_columns_kernel<<<blocks_for(size_t(rows) * width), kThreads, 0, stream>>>(src, rows, width, dst, dst_stride,
                                                                                     col_offset);
  }
}

}  // namespace actord::cuda
