#include "executors/cpu/reference_kernels.hpp"

#include <algorithm>
#include <cmath>

namespace actord::cpu::reference {

void rms_norm(const float* x, const float* weight, float* y, int n_rows, int dim, float eps) {
  for (int r = 0; r < n_rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double scale = 1.0 / std::sqrt(ss / dim + eps);
    for (int i = 0; i < dim; ++i) y[r * dim + i] = float(x[r * dim + i] * scale * weight[i]);
  }
}

void matmul_nt(const float* x, const float* w, float* y, int m, int n, int k) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int t = 0; t < k; ++t) acc += double(x[int64_t(i) * k + t]) * w[int64_t(j) * k + t];
      y[int64_t(i) * n + j] = float(acc);
    }
}

void rope_rotate_half(float* x, int n_heads, int head_dim, int rotary_dim, int pos, float theta, double scale) {
  const int half = rotary_dim / 2;
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < half; ++i) {
      const double angle = pos * std::pow(double(theta), -2.0 * i / rotary_dim);
      const double a = x[h * head_dim + i], b = x[h * head_dim + i + half];
      const double c = std::cos(angle) * scale, s = std::sin(angle) * scale;
      x[h * head_dim + i] = float(a * c - b * s);
      x[h * head_dim + i + half] = float(b * c + a * s);
    }
}

void silu_mul(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) gate[i] = float(double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * up[i]);
}

void gelu_tanh_mul(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    const double x = gate[i];
    gate[i] = float(0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * up[i]);
  }
}

void attention(const float* q, const float* k, const float* v, float* out, int n_tokens, int start_pos, int n_heads,
               int n_kv_heads, int head_dim, int sliding_window, float softcap) {
  const int q_row = n_heads * head_dim, kv_row = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
  for (int t = 0; t < n_tokens; ++t)
    for (int h = 0; h < n_heads; ++h) {
      const int n_ctx = start_pos + t + 1, g = h / group;
      const int first = sliding_window > 0 ? std::max(0, n_ctx - sliding_window) : 0;
      std::vector<double> s(n_ctx, -INFINITY);
      double mx = -INFINITY, sum = 0;
      for (int j = first; j < n_ctx; ++j) {
        double dot = 0;
        for (int d = 0; d < head_dim; ++d) dot += double(q[t * q_row + h * head_dim + d]) * k[j * kv_row + g * head_dim + d];
        s[j] = dot / std::sqrt(double(head_dim));
        if (softcap > 0) s[j] = softcap * std::tanh(s[j] / softcap);
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));  // exp(-inf) = 0 outside the window
      for (int d = 0; d < head_dim; ++d) {
        double acc = 0;
        for (int j = 0; j < n_ctx; ++j) acc += s[j] / sum * v[j * kv_row + g * head_dim + d];
        out[t * q_row + h * head_dim + d] = float(acc);
      }
    }
}

}  // namespace actord::cpu::reference
