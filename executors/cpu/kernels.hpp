// CPU kernels of the forward pass besides the GEMMs (gemm.hpp), f32, portable C++. They cost a small fraction of
// a step (the GEMMs dominate); attention is parallelised by its caller over (sequence, head) pairs. Each has a
// plain double-precision reference in reference_kernels.hpp and a parity test against it.
//
// Contract: pointers are dense row-major arrays with the shapes written beside each parameter; outputs never
// alias inputs unless stated. No allocation, no threads, no failure modes: shapes are the caller's invariant.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace actord::cpu {

// y[r] = x[r] / rms(x[r]) * weight, for each of n_rows rows of dim floats. y may alias x.
void rms_norm(const float* x, const float* weight, float* y, int n_rows, int dim, float eps);

// The RoPE inverse frequencies [rotary_dim / 2]: theta^(-2i / rotary_dim), computed in f32 as HF does.
void rope_inv_freq(int rotary_dim, float theta, float* inv_freq);

// In place, HF "rotate half" RoPE for one token: x is [n_heads, head_dim]; in each head the first rotary_dim
// (<= head_dim, even) elements rotate, pairs (i, i + rotary_dim / 2) by pos * inv_freq[i]; the rest pass through
// (partial rotary: Phi-4-mini). cos and sin are multiplied by `scale` (LongRoPE's and YaRN's attention factor).
void rope_rotate_half(float* x, int n_heads, int head_dim, int rotary_dim, int pos, const float* inv_freq,
                      float scale = 1.0f);

// gate[i] = silu(gate[i]) * up[i], n elements.
void silu_mul(float* gate, const float* up, int n);
// gate[i] = gelu_tanh(gate[i]) * up[i] (HF's gelu_pytorch_tanh), n elements.
void gelu_tanh_mul(float* gate, const float* up, int n);

// x[i] += y[i]
void add_inplace(float* x, const float* y, int n);
// x[i] = cap tanh(x[i] / cap)
void softcap_inplace(float* x, float cap, size_t n);

struct PagedAttentionParams {
  const float* q = nullptr;           // [n_tokens, n_heads * head_dim]
  float* out = nullptr;               // [n_tokens, n_heads * head_dim]
  int n_tokens = 0;
  int start_pos = 0;                  // token t sits at position start_pos + t and sees positions 0..start_pos + t
  int n_heads = 0;
  int n_kv_heads = 0;                 // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_begin = 0;                 // only query heads [head_begin, head_end) are computed
  int head_end = 0;                   // 0: all heads
  int sliding_window = 0;             // > 0: position p sees only positions p - sliding_window + 1 .. p
  float logit_softcap = 0.0f;         // > 0: each score s becomes cap tanh(s / cap) before the softmax
  int head_dim = 0;
  int block_size = 0;
  const uint32_t* block_table = nullptr;  // [ceil((start_pos + n_tokens) / block_size)]
  // Base pointers into the paged cache of one layer (KvCache's layout): the row of kv head g at slot s of block b
  // starts at base + b * block_stride + g * head_stride + s * head_dim elements of kv_dtype; i8 rows hold codes, the
  // head region's scales after its rows (core/kv_rows.hpp).
  const void* k_base = nullptr;
  const void* v_base = nullptr;
  DType kv_dtype = DType::f32;
  int64_t block_stride = 0;           // elements between consecutive blocks
  int64_t head_stride = 0;            // elements between consecutive kv heads of a block (kv_head_stride)
};

// How many query heads one decode attention task should take when n_seqs sequences decode on `threads` threads:
// as many as still leaves a task per thread, and tasks that come out even over the threads or number at least four
// per thread (more heads per task read each K/V block in longer sequential runs, which matters once the K/V comes
// from DRAM, as it does between layers that stream their weights), rounded up to whole GQA groups, at most n_heads.
// One sequence of the 134M model on 2 threads, K/V evicted between layers (actord_attention_bench with EVICT_MB),
// 512 positions: 6 heads a task 0.53-0.55 ms a step, 2 heads 0.67-0.78.
int decode_heads_per_task(int n_heads, int n_kv_heads, int n_seqs, int threads);

// Causal scaled-dot-product attention over paged K/V (attention_impl.inl); any head_dim, GQA ratio and block size.
// Runs the instance for the best instruction set this CPU has.
void paged_attention(const PagedAttentionParams& p);

enum class Isa;  // gemm.hpp
// The same, forcing an instruction set (Isa::automatic: the best available; an ISA the CPU lacks falls back to the
// best it has below it). For parity tests and benchmarks.
void paged_attention(const PagedAttentionParams& p, Isa isa);

}  // namespace actord::cpu
