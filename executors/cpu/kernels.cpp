#include "executors/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>

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

void rope_inv_freq(int head_dim, float theta, float* inv_freq) {
  for (int i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
}

void rope_rotate_half(float* x, int n_heads, int head_dim, int pos, const float* inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle);
    const float s = std::sin(angle);
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + static_cast<int64_t>(h) * head_dim;
      const float a = xh[i];
      const float b = xh[i + half];
      xh[i] = a * c - b * s;
      xh[i + half] = b * c + a * s;
    }
  }
}

void embedding_row(const void* row, DType dtype, int dim, float* out) {
  convert_to_f32(dtype, row, out, static_cast<size_t>(dim));
}

void silu_mul(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* x, const float* y, int n) {
  for (int i = 0; i < n; ++i) x[i] += y[i];
}

// Compiled twice (AVX2+FMA and baseline), picked at load time by the CPU; the head_dim loops are vectorised.
// Keys are visited block by block: one head's keys in a block are contiguous ([block_size, head_dim]).
__attribute__((target_clones("arch=haswell", "default"))) void paged_attention(const PagedAttentionParams& p) {
  const int q_row = p.n_heads * p.head_dim;
  const int hd = p.head_dim;
  const int group = p.n_heads / p.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int head_end = p.head_end > 0 ? p.head_end : p.n_heads;
  // Calls f(j, pointer to head g's row at position j) for j in [first, n_ctx), walking the block table.
  auto for_each_position = [&](const float* base, int g, int first, int n_ctx, auto&& f) {
    for (int block = first / p.block_size; block * p.block_size < n_ctx; ++block) {
      const float* rows = base + p.block_table[block] * p.block_stride + static_cast<int64_t>(g) * p.head_stride;
      const int begin = std::max(first, block * p.block_size), end = std::min(n_ctx, (block + 1) * p.block_size);
      for (int j = begin; j < end; ++j) f(j, rows + static_cast<int64_t>(j - block * p.block_size) * hd);
    }
  };
  for (int t = 0; t < p.n_tokens; ++t) {
    const int n_ctx = p.start_pos + t + 1;
    const int first = p.sliding_window > 0 ? std::max(0, n_ctx - p.sliding_window) : 0;
    for (int h = p.head_begin; h < head_end; ++h) {
      const float* q = p.q + static_cast<int64_t>(t) * q_row + static_cast<int64_t>(h) * hd;
      const int g = h / group;
      float max_score = -INFINITY;
      for_each_position(p.k_base, g, first, n_ctx, [&](int j, const float* k) {
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
        p.scratch[j] = dot * scale;
        max_score = std::max(max_score, p.scratch[j]);
      });
      float sum = 0.0f;
      for (int j = first; j < n_ctx; ++j) {
        p.scratch[j] = std::exp(p.scratch[j] - max_score);
        sum += p.scratch[j];
      }
      float* out = p.out + static_cast<int64_t>(t) * q_row + static_cast<int64_t>(h) * hd;
      std::fill(out, out + hd, 0.0f);
      for_each_position(p.v_base, g, first, n_ctx, [&](int j, const float* v) {
        const float w = p.scratch[j] / sum;
#pragma omp simd
        for (int d = 0; d < hd; ++d) out[d] += w * v[d];
      });
    }
  }
}

}  // namespace actord::cpu
