// y [n, m] = x [n, k] W^T for 16-bit weights and n <= kSmallBatchRows: the decode step's products, where cuBLAS's
// GEMM tiles leave most of the weight stream idle. Each warp reads one weight row once with 16-byte streaming loads
// (four in flight per lane) and multiplies it with every row of x (f32, each value rounded to the weights' type as
// it is read, as the cuBLAS path rounds it first), summing in f32; a warp sum per output. Memory-bound: the goal is
// the copy bandwidth.
#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

namespace actord::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kInFlight = 4;  // 16-byte weight loads per lane before the first use

// The eight 16-bit values of a 16-byte chunk as floats.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& v, float* out);
template <>
__device__ __forceinline__ void unpack8<__nv_bfloat16>(const uint4& v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void unpack8<__half>(const uint4& v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

template <class T, int N>
__device__ __forceinline__ void accumulate(const uint4& wv, const float4* const* xs, int chunk, float* acc) {
  float w[8];
  unpack8<T>(wv, w);
#pragma unroll
  for (int r = 0; r < N; ++r) {
    const float4 lo = __ldg(xs[r] + 2 * chunk), hi = __ldg(xs[r] + 2 * chunk + 1);
    const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(w[e], to_f32(from_f32<T>(x[e])), acc[r]);  // x rounded to T
  }
}

template <class T, int N>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) small_batch_gemm_kernel(const T* __restrict__ w,
                                                                               const float* __restrict__ x, int m,
                                                                               int k, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= m) return;
  const int chunks = k / 8;
  const uint4* wr = reinterpret_cast<const uint4*>(w + size_t(row) * size_t(k));
  const float4* xs[N];
#pragma unroll
  for (int r = 0; r < N; ++r) xs[r] = reinterpret_cast<const float4*>(x + size_t(r) * size_t(k));
  float acc[N];
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = 0.0f;
  int c = lane;
  for (; c + 32 * (kInFlight - 1) < chunks; c += 32 * kInFlight) {
    uint4 wv[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) wv[i] = __ldcs(wr + c + 32 * i);
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) accumulate<T, N>(wv[i], xs, c + 32 * i, acc);
  }
  for (; c < chunks; c += 32) accumulate<T, N>(__ldcs(wr + c), xs, c, acc);
#pragma unroll
  for (int r = 0; r < N; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0) y[size_t(r) * size_t(m) + size_t(row)] = s;
  }
}

template <class T, int N>
void launch_rows(const void* w, const float* x, int m, int k, float* y, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>((m + kWarpsPerBlock - 1) / kWarpsPerBlock);
  small_batch_gemm_kernel<T, N>
      <<<grid, 32 * kWarpsPerBlock, 0, stream>>>(static_cast<const T*>(w), x, m, k, y);
}

template <class T>
void launch_typed(const void* w, const float* x, int n, int m, int k, float* y, cudaStream_t stream) {
  switch (n) {
    case 1: launch_rows<T, 1>(w, x, m, k, y, stream); break;
    case 2: launch_rows<T, 2>(w, x, m, k, y, stream); break;
    case 3: launch_rows<T, 3>(w, x, m, k, y, stream); break;
    case 4: launch_rows<T, 4>(w, x, m, k, y, stream); break;
    case 5: launch_rows<T, 5>(w, x, m, k, y, stream); break;
    case 6: launch_rows<T, 6>(w, x, m, k, y, stream); break;
    case 7: launch_rows<T, 7>(w, x, m, k, y, stream); break;
    case 8: launch_rows<T, 8>(w, x, m, k, y, stream); break;
    default: break;
  }
}

}  // namespace

bool small_batch_gemm_fits(DType dtype, int n, int k) {
  return (dtype == DType::bf16 || dtype == DType::f16) && n >= 1 && n <= kSmallBatchRows && k > 0 && k % 8 == 0;
}

void launch_small_batch_gemm(const void* w, DType dtype, const float* x, int n, int m, int k, float* y,
                             cudaStream_t stream) {
  if (m <= 0 || !small_batch_gemm_fits(dtype, n, k)) return;
  if (dtype == DType::bf16) {
    launch_typed<__nv_bfloat16>(w, x, n, m, k, y, stream);
  } else {
    launch_typed<__half>(w, x, n, m, k, y, stream);
  }
}

}  // namespace actord::cuda
