// y [n, m] = x [n, k] W^T for 16-bit weights and n <= kSmallBatchRows: the decode step's products, where cuBLAS's
// GEMM tiles leave most of the weight stream idle. Each warp reads one weight row once with 16-byte streaming loads
// (eight or four in flight per lane) and multiplies it with every row of x (f32, each value rounded to the weights'
// type as it is read, as the cuBLAS path rounds it first), summing in f32; a warp sum per output. Memory-bound: the goal is
// the copy bandwidth. One launch serves several products of the same x (Q, K and V: the rows of all targets one
// after the other, each with its bias), and the gated MLP's two halves (a warp takes gate row j and up row j and
// writes silu(gate) * up). A target may add its product to what y holds (the residual stream's update).
#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

#include <type_traits>

namespace actord::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
// 16-byte weight loads per lane before the first use: 8 for one row of x (a batch-1 decode, where a product of
// 4,096 weight rows leaves each SM ~31 warps: twice the loads in flight), 4 for more (their registers).
template <int N>
constexpr int kInFlight = N == 1 ? 8 : 4;

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

// kEarly: the kernel may have started while the kernel before it, which writes x, still runs
// (launch_after_previous): x is read with plain loads, the read-only path (__ldg, ld.global.nc) being defined only
// for data that no running grid writes. Launched plainly, x goes through the read-only path (the sixth and seventh
// device leases: batch-1 MBU 0.776 with it, 0.729 with plain loads, H100).
template <class T, int N, bool kEarly>
__device__ __forceinline__ void accumulate(const uint4& wv, const float4* const* xs, int chunk, float* acc) {
  float w[8];
  unpack8<T>(wv, w);
#pragma unroll
  for (int r = 0; r < N; ++r) {
    float4 lo, hi;
    if constexpr (kEarly) {
      lo = xs[r][2 * chunk];
      hi = xs[r][2 * chunk + 1];
    } else {
      lo = __ldg(xs[r] + 2 * chunk);
      hi = __ldg(xs[r] + 2 * chunk + 1);
    }
    const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(w[e], to_f32(from_f32<T>(x[e])), acc[r]);  // x rounded to T
  }
}

// acc[r] = sum over k of row[k] * x[r][k] (rounded), warp-summed: every lane holds the totals. With `first`, the
// kernel may have started before the previous one ended (launch_after_previous): the first weight loads are in
// flight before it waits for that kernel, then x is read.
template <class T, int N, bool kEarly>
__device__ __forceinline__ void row_products(const T* row, const float4* const* xs, int k, int lane, float* acc,
                                             bool first = false) {
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = 0.0f;
  const int chunks = k / 8;
  const uint4* wr = reinterpret_cast<const uint4*>(row);
  int c = lane;
  constexpr int kLoads = kInFlight<N>;
  for (; c + 32 * (kLoads - 1) < chunks; c += 32 * kLoads) {
    uint4 wv[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) wv[i] = __ldcs(wr + c + 32 * i);
    if (first) {
      wait_for_previous_grid();
      first = false;
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) accumulate<T, N, kEarly>(wv[i], xs, c + 32 * i, acc);
  }
  if (first) wait_for_previous_grid();
  for (; c < chunks; c += 32) accumulate<T, N, kEarly>(__ldcs(wr + c), xs, c, acc);
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = warp_sum(acc[r]);
}

template <int N>
__device__ __forceinline__ void rows_of_x(const float* x, int k, const float4** xs) {
#pragma unroll
  for (int r = 0; r < N; ++r) xs[r] = reinterpret_cast<const float4*>(x + size_t(r) * size_t(k));
}

// Warp w of the grid takes row w of the targets' rows laid end to end.
template <class T, int N, bool kEarly>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) small_batch_gemm_kernel(SmallBatchTargets targets,
                                                                               const float* x, int k) {
  const int lane = threadIdx.x & 31;
  int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  // The target of this row (unrolled: constant indexes keep the parameters out of local memory).
  const T* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int m = 0;
  bool accumulate = false;
#pragma unroll
  for (int i = 0; i < kSmallBatchTargets; ++i) {
    if (w == nullptr && i < targets.count) {
      if (row < targets.rows[i]) {
        w = static_cast<const T*>(targets.w[i]);
        bias = targets.bias[i];
        y = targets.y[i];
        m = targets.rows[i];
        accumulate = targets.accumulate[i];
      } else {
        row -= targets.rows[i];
      }
    }
  }
  let_next_grid_start();
  if (w == nullptr) return;
  const float4* xs[N];
  rows_of_x<N>(x, k, xs);
  float acc[N];
  row_products<T, N, kEarly>(w + size_t(row) * size_t(k), xs, k, lane, acc, true);
  if (lane == 0) {
    const float b = bias ? bias[row] : 0.0f;
#pragma unroll
    for (int r = 0; r < N; ++r) {
      float* out = y + size_t(r) * size_t(m) + size_t(row);
      const float product = bias ? acc[r] + b : acc[r];
      *out = accumulate ? *out + product : product;  // the residual add of the model, in the product's epilogue
    }
  }
}

// Warp j: gate row j and up row ff + j of w [2 ff, k]; y [n, ff] = silu(gate) * up.
template <class T, int N, bool kEarly>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) small_batch_glu_kernel(const T* __restrict__ w,
                                                                              const float* x, int ff,
                                                                              int k, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int j = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  let_next_grid_start();
  if (j >= ff) return;
  const float4* xs[N];
  rows_of_x<N>(x, k, xs);
  float gate[N], up[N];
  row_products<T, N, kEarly>(w + size_t(j) * size_t(k), xs, k, lane, gate, true);
  row_products<T, N, kEarly>(w + size_t(ff + j) * size_t(k), xs, k, lane, up);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < N; ++r) y[size_t(r) * size_t(ff) + size_t(j)] = silu(gate[r]) * up[r];
  }
}

unsigned blocks_for_rows(int64_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// f(integral_constant<N>) for n in 1 .. kSmallBatchRows.
template <class F>
void with_rows(int n, F&& f) {
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: break;
  }
}

// f(bool_constant<early>): the kernels' read of x follows their launch order (kEarly).
template <class F>
void with_launch_order(bool early, F&& f) {
  if (early) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

template <class F>
void with_16_bit_type(DType dtype, F&& f) {
  if (dtype == DType::bf16) {
    f(__nv_bfloat16{});
  } else {
    f(__half{});
  }
}

}  // namespace

bool small_batch_gemm_fits(DType dtype, int n, int k) {
  return (dtype == DType::bf16 || dtype == DType::f16) && n >= 1 && n <= kSmallBatchRows && k > 0 && k % 8 == 0;
}

void launch_small_batch_gemm(const SmallBatchTargets& targets, DType dtype, const float* x, int n, int k,
                             cudaStream_t stream, bool early) {
  if (!small_batch_gemm_fits(dtype, n, k) || targets.count <= 0 || targets.count > kSmallBatchTargets) return;
  int64_t rows = 0;
  for (int t = 0; t < targets.count; ++t) rows += targets.rows[t];
  if (rows == 0) return;
  with_16_bit_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    with_rows(n, [&](auto rows_of_x_const) {
      constexpr int N = decltype(rows_of_x_const)::value;
      with_launch_order(early, [&](auto early_const) {
        constexpr bool kEarly = decltype(early_const)::value;
        launch_after_previous(kEarly, small_batch_gemm_kernel<T, N, kEarly>, blocks_for_rows(rows),
                              32 * kWarpsPerBlock, stream, targets, x, k);
      });
    });
  });
}

void launch_small_batch_glu(const void* w, DType dtype, const float* x, int n, int ff, int k, float* y,
                            cudaStream_t stream, bool early) {
  if (!small_batch_gemm_fits(dtype, n, k) || ff <= 0) return;
  with_16_bit_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    with_rows(n, [&](auto rows_of_x_const) {
      constexpr int N = decltype(rows_of_x_const)::value;
      with_launch_order(early, [&](auto early_const) {
        constexpr bool kEarly = decltype(early_const)::value;
        launch_after_previous(kEarly, small_batch_glu_kernel<T, N, kEarly>, blocks_for_rows(ff), 32 * kWarpsPerBlock,
                              stream, static_cast<const T*>(w), x, ff, k, y);
      });
    });
  });
}

}  // namespace actord::cuda
