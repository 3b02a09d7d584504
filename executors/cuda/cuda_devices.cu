// The CUDA devices this process can use, asked of the runtime (executors/cuda/cuda_backend.hpp's device_count,
// unavailable_reason and device_names; no_cuda.cpp answers them in a build without CUDA).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "executors/cuda/cuda_backend.hpp"

namespace actord::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string unavailable_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device usable (no driver, or none this runtime accepts): ") + cudaGetErrorString(err);
  }
  return n == 0 ? "no CUDA device" : "";
}

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  for (int d = 0, n = device_count(); d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    names.push_back(std::string(prop.name) + " (" + std::to_string(prop.totalGlobalMem >> 30) + " GiB, sm_" +
                    std::to_string(prop.major) + std::to_string(prop.minor) + ")");
  }
  return names;
}

}  // namespace actord::cuda
