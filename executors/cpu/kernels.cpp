#include "executors/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>

#include "executors/cpu/vector_math.hpp"

namespace actord::cpu {

void rms_norm(const float* x, const float* weight, float* y, int n_rows, int dim, float eps) {
  for (int r = 0; r < n_rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    float* yr = y + static_cast<int64_t>(r) * dim;
    float ss = 0.0f;
    for (int i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void rope_inv_freq(int rotary_dim, float theta, float* inv_freq) {
  for (int i = 0; i < rotary_dim / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
  }
}

void rope_rotate_half(float* x, int n_heads, int head_dim, int rotary_dim, int pos, const float* inv_freq,
                      float scale) {
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle) * scale;
    const float s = std::sin(angle) * scale;
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + static_cast<int64_t>(h) * head_dim;
      const float a = xh[i];
      const float b = xh[i + half];
      xh[i] = a * c - b * s;
      xh[i + half] = b * c + a * s;
    }
  }
}

void silu_mul(float* gate, const float* up, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
}

void gelu_tanh_mul(float* gate, const float* up, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
}

void softcap_inplace(float* x, float cap, size_t n) {
  const float inv = 1.0f / cap;
#pragma omp simd
  for (size_t i = 0; i < n; ++i) x[i] = softcap(x[i], cap, inv);
}

void add_inplace(float* x, const float* y, int n) {
  for (int i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace actord::cpu
