// The sampler's seeded randomness: one definition for the CPU sampler (sampler.cpp) and the CUDA one
// (cuda/device_sampler.cu), so that both draw the same number for the same request.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ACTORD_HOST_DEVICE __host__ __device__
#else
#define ACTORD_HOST_DEVICE
#endif

namespace actord {

// A uniform double in [0, 1) from a 64-bit key (splitmix64).
ACTORD_HOST_DEVICE inline double uniform_from_key(uint64_t key) {
  uint64_t z = key + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// The key of a draw: a request's seed and its sample index (the tokens generated before).
ACTORD_HOST_DEVICE inline uint64_t draw_key(uint64_t seed, uint32_t sample_index) {
  return seed * 0x100000001b3ull ^ (uint64_t(sample_index) + 1) * 0x9e3779b97f4a7c15ull;
}

}  // namespace actord
