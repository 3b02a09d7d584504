// Device helpers the CUDA backend's kernel files share: element conversions of the weight / KV dtypes, the dtype
// switch of launches, the best of (value, column) pairs, a warp's sum, a token's place in the paged KV cache.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "core/status.hpp"
#include "executors/cuda/device_memory.hpp"
#include "executors/cuda/cuda_kernels.cuh"

namespace actord::cuda {

template <class T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// Calls f.template operator()<T>() with T the element type of dtype: a float dtype (this backend stores no i8 KV
// cache and has no i8 weights: Backend::stores_kv).
template <class F>
inline void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    case DType::f16: f(__half{}); return;
    case DType::i8: break;
  }
  ACTORD_CHECK_MSG(false, "an i8 tensor on the cuda backend");
}

// The gated MLP's activation, one formula for every kernel that applies it.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

// (value, column) pairs of one row: b replaces a when a holds nothing yet (column < 0), or b's value is higher, or
// equal at a lower column; columns < 0 hold nothing.
__device__ __forceinline__ void keep_best(float& value, int& column, float other_value, int other_column) {
  if (other_column < 0) return;
  if (column < 0 || other_value > value || (other_value == value && other_column < column)) {
    value = other_value;
    column = other_column;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Programmatic dependent launch (sm_90): a kernel launched with launch_after_previous() may start while the kernel
// before it in the stream still runs. Such a kernel must call wait_for_previous_grid() before it reads or writes
// anything an earlier kernel touches (it may read weights before), and read such data with ordinary loads: never
// __ldg or const __restrict__ pointers (ld.global.nc), whose read-only cache and invariant loads assume that no
// grid writes the data while this one runs, which the kernel before it may still do. A kernel that calls let_next_grid_start() lets
// its dependent's blocks start once every block of it has called it, instead of at its end. Elsewhere (a kernel
// launched plainly, an older device) both are no-ops.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void let_next_grid_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// kernel<<<grid, block, 0, stream>>>(args...), launched so that it may start before the previous kernel of the
// stream ends where `early` (it then calls wait_for_previous_grid() before touching that kernel's data).
template <class... Params, class... Args>
inline void launch_after_previous(bool early, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                                  Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = early ? 1 : 0;
  if (early && cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess) return;
  if (early) {  // a driver or a graph capture that refuses the attribute: the plain launch, in stream order
    cudaGetLastError();
    config.numAttrs = 0;
  }
  ACTORD_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

__device__ __forceinline__ int64_t kv_offset(const StepLayout& step, const KvView& kv, int seq, int pos, int g,
                                             int head_dim) {
  const uint32_t block = step.tables[step.seq_table[seq] + pos / kv.block_size];
  return int64_t(block) * kv.block_stride + int64_t(g) * kv.head_stride + int64_t(pos % kv.block_size) * head_dim;
}

}  // namespace actord::cuda
