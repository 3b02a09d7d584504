// What the CUDA backend's host code shares: fatal checks of CUDA and cuBLAS calls, and device scratch that grows.
//
// Contract: a CUDA or cuBLAS failure inside a primitive is fatal for the worker (its process ends; the engine
// recovers the replica), as a failed CPU kernel would be; at creation it is an Error, not these. device_memory()
// is freed with its last owner; reserve_bytes() replaces `memory` with a larger block when `have` is short (the old
// block's cudaFree waits for the kernels that read it), growing by half again to spare repeated reallocations.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#define ACTORD_CUDA_CHECK(call)                                                                         \
  do {                                                                                                  \
    const cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "%s:%d: CUDA error: %s (%s)\n", __FILE__, __LINE__, cudaGetErrorString(err_), \
                   #call);                                                                              \
      std::abort();                                                                                     \
    }                                                                                                   \
  } while (0)

#define ACTORD_CUBLAS_CHECK(call)                                                                \
  do {                                                                                           \
    const cublasStatus_t st_ = (call);                                                           \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "%s:%d: cuBLAS error %d (%s)\n", __FILE__, __LINE__, int(st_), #call); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace actord::cuda {

inline std::shared_ptr<void> device_memory(size_t bytes) {
  void* p = nullptr;
  ACTORD_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

inline void reserve_bytes(std::shared_ptr<void>& memory, size_t& have, size_t bytes) {
  if (have >= bytes) return;
  have = std::max(bytes, have + have / 2);
  memory.reset();
  memory = device_memory(have);
}

}  // namespace actord::cuda
