// CPU kernels of the forward pass, f32. Straightforward, portable C++ (the vectorised, multi-threaded versions
// come with the fast CPU executor); each has a plain double-precision reference in reference_kernels.hpp and a
// parity test against it.
//
// Contract: pointers are dense row-major arrays with the shapes written beside each parameter; outputs never
// alias inputs unless stated. No allocation, no threads, no failure modes: shapes are the caller's invariant.
#pragma once

#include <cstdint>

namespace actord::cpu {

// y[r] = x[r] / rms(x[r]) * weight, for each of n_rows rows of dim floats. y may alias x.
void rms_norm(const float* x, const float* weight, float* y, int n_rows, int dim, float eps);

// y[m, n] = x[m, k] · w[n, k]^T  (HF Linear layout: weight rows are output features).
void matmul_nt(const float* x, const float* w, float* y, int m, int n, int k);

// y[m, n] += bias[n]
void add_bias(float* y, const float* bias, int m, int n);

// In place, HF "rotate half" RoPE for one token: x is [n_heads, head_dim]; pairs (i, i + head_dim/2).
void rope_rotate_half(float* x, int n_heads, int head_dim, int pos, float theta);

// gate[i] = silu(gate[i]) * up[i], n elements.
void silu_mul(float* gate, const float* up, int n);

// x[i] += y[i]
void add_inplace(float* x, const float* y, int n);

struct PagedAttentionParams {
  const float* q = nullptr;           // [n_tokens, n_heads * head_dim]
  float* out = nullptr;               // [n_tokens, n_heads * head_dim]
  int n_tokens = 0;
  int start_pos = 0;                  // token t sits at position start_pos + t and sees positions 0..start_pos + t
  int n_heads = 0;
  int n_kv_heads = 0;                 // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  int block_size = 0;
  const uint32_t* block_table = nullptr;  // [ceil((start_pos + n_tokens) / block_size)]
  // Base pointers into the paged cache of one layer; block b, slot s, kv head g starts at
  // base + (b * block_stride + s * row) + g * head_dim.
  const float* k_base = nullptr;
  const float* v_base = nullptr;
  int64_t block_stride = 0;           // floats between consecutive blocks
  float* scratch = nullptr;           // [start_pos + n_tokens] scores of one head
};

// Causal scaled-dot-product attention over paged K/V.
void paged_attention(const PagedAttentionParams& p);

}  // namespace actord::cpu
