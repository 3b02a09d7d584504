// Plain double-precision reference implementations of the CPU kernels (kernels.hpp), for parity tests only.
// Same shapes and contracts as their fast twins; attention reads contiguous K/V instead of paged blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace actord::cpu::reference {

void rms_norm(const float* x, const float* weight, float* y, int n_rows, int dim, float eps);
void matmul_nt(const float* x, const float* w, float* y, int m, int n, int k);
void rope_rotate_half(float* x, int n_heads, int head_dim, int rotary_dim, int pos, float theta, double scale = 1.0);
void silu_mul(float* gate, const float* up, int n);
void gelu_tanh_mul(float* gate, const float* up, int n);

// q: [n_tokens, n_heads * head_dim]; k, v: [start_pos + n_tokens, n_kv_heads * head_dim]; out like q.
// sliding_window > 0: position p sees only positions p - sliding_window + 1 .. p.
void attention(const float* q, const float* k, const float* v, float* out, int n_tokens, int start_pos, int n_heads,
               int n_kv_heads, int head_dim, int sliding_window = 0, float softcap = 0.0f);

}  // namespace actord::cpu::reference
