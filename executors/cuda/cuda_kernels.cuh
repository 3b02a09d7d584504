// The CUDA backend's own kernels (everything but the larger GEMMs, which are cuBLAS). Each launch_* queues one kernel on
// `stream`; pointers are device memory. Elements of weights and KV blocks are f32, bf16 or f16 (DType); activations
// are f32. Their references are the CPU backend's kernels (executors/cpu/), which tests/cuda_backend_test.cpp holds
// them to on random inputs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"
#include "executors/attention_plan.hpp"
#include "executors/device_sampling_plan.hpp"
#include "executors/row_best.hpp"

namespace actord::cuda {

// The step's layout on the device (CudaBackend::begin_step): for each token its sequence and position, for each
// sequence its first token, token count, start position and where its block table starts in `tables`.
struct StepLayout {
  const int32_t* tokens = nullptr;       // [n]
  const int32_t* token_seq = nullptr;    // [n]
  const int32_t* token_pos = nullptr;    // [n]
  const int32_t* seq_table = nullptr;    // [sequences] offset of each sequence's block table in tables
  const uint32_t* tables = nullptr;      // block tables back to back
  int n = 0;
  // The parts of an AttentionPlan (executors/attention_plan.hpp), in device memory. Prefill tiles
  // (launch_prefill_attention): {first token, token count <= kPrefillTileQueries, sequence} each.
  const int32_t* tiles = nullptr;        // [n_tiles][3]
  const int32_t* seq_tiled = nullptr;    // [sequences] 1: its tokens are in tiles; 2: a decode cut in splits
  int n_tiles = 0;
  // Split-K decodes (launch_split_attention): {token, split, splits of the token} each, a token's splits in order.
  const int32_t* splits = nullptr;       // [n_splits][3]
  int n_splits = 0;
};



struct KvView {
  void* k_base = nullptr;
  void* v_base = nullptr;
  DType dtype = DType::f32;
  int block_size = 0;
  int64_t block_stride = 0;  // elements
  int64_t head_stride = 0;   // elements
};

// out[t] = table[tokens[t] - vocab_first] as f32, or zeros outside [vocab_first, vocab_first + rows). A token
// previous_pick(k) (executors/forward_batch.hpp) is picks[k].id (picks: the previous step's row bests).
void launch_embed(const StepLayout& step, const RowBest* picks, const void* table, DType dtype, int64_t vocab_first,
                  int64_t rows, int h, float* out, cudaStream_t stream);
void launch_rms_norm(const float* x, const float* w, float* y, int n, int dim, float eps, cudaStream_t stream);
// dst[i] = src[i] rounded to dtype (bf16 or f16), i < count: a GEMM's activations.
void launch_round_to(const float* src, void* dst, DType dtype, size_t count, cudaStream_t stream);
// For small n (decode steps; small_batch_gemm.cu: one warp streams each weight row once), only where
// small_batch_gemm_fits (n <= 8, k % 8 == 0) and x is 16-byte aligned. W [m, k] row-major bf16 or f16, x [n, k] f32
// rounded to W's type as it is read, f32 sums.
constexpr int kSmallBatchRows = 8;
constexpr int kSmallBatchTargets = 4;
bool small_batch_gemm_fits(DType dtype, int n, int k);
// For each target t < count (all of dtype and k columns): y[t] [n, rows[t]] = x W[t]^T (+ bias[t] where not null),
// added to what y[t] holds where accumulate[t].
struct SmallBatchTargets {
  const void* w[kSmallBatchTargets] = {};
  const float* bias[kSmallBatchTargets] = {};
  float* y[kSmallBatchTargets] = {};
  int rows[kSmallBatchTargets] = {};
  bool accumulate[kSmallBatchTargets] = {};
  int count = 0;
};
// early: launched so that its blocks may start, and load their first weights, while the stream's previous kernel
// still runs (programmatic dependent launch; the same results).
void launch_small_batch_gemm(const SmallBatchTargets& targets, DType dtype, const float* x, int n, int k,
                             cudaStream_t stream, bool early = false);
// y [n, ff] = silu(x G^T) * (x U^T) with w = [G; U] [2 ff, k].
void launch_small_batch_glu(const void* w, DType dtype, const float* x, int n, int ff, int k, float* y,
                            cudaStream_t stream, bool early = false);
// y[r, c] += bias[c], r < n, c < m.
void launch_add_bias(float* y, const float* bias, int n, int m, cudaStream_t stream);
// y[r, c] = silu(gu[r, c]) * gu[r, ff + c]: the gate and up halves of one [n, 2 ff] product.
void launch_silu_mul_halves(const float* gu, float* y, int n, int64_t ff, cudaStream_t stream);
// gate[i] = act(gate[i]) * up[i]; act 0 silu, 1 gelu (tanh approximation), 2 gelu (erf).
void launch_gated_activation(int act, float* gate, const float* up, size_t count, cudaStream_t stream);
void launch_add(float* x, const float* y, size_t count, cudaStream_t stream);
// x[i] *= factor, i < count.
void launch_scale(float* x, float factor, size_t count, cudaStream_t stream);
// x[i] = cap tanh(x[i] / cap), i < count.
void launch_softcap(float* x, float cap, size_t count, cudaStream_t stream);
// Rotate-half RoPE of q [n, n_heads, hd] and k [n, n_kv_heads, hd] at each token's position (each head's first
// rotary_dim elements, cos and sin times rotary_scale; the rest unchanged); k and v stored into the cache at the
// token's block and slot.
void launch_rope_store_kv(const StepLayout& step, float* q, float* k, const float* v, int n_heads, int n_kv_heads,
                          int head_dim, int rotary_dim, float rotary_scale, const float* inv_freq, const KvView& kv,
                          cudaStream_t stream);
// out [n, n_heads * hd] = causal attention of each token's queries over its sequence's cached K/V (positions 0 ..
// its own, or the last `window` of them), softmax scaled by 1/sqrt(hd), GQA (head h reads kv head
// h / (n_heads / n_kv_heads)). One warp per (token, head) with an online softmax over the keys: any head_dim up to
// 256.
// Tokens of sequences whose step.seq_tiled flag has a bit of skip_flags set are left to the other kernels (1:
// launch_prefill_attention, 2: launch_split_attention). decode_attention.cu.
void launch_paged_attention(const StepLayout& step, const float* q, float* out, int n_heads, int n_kv_heads,
                            int head_dim, int window, const KvView& kv, int skip_flags, cudaStream_t stream);
// The same attention for the decodes of step.splits, split-K: a warp per (split, head) into partial
// [n_splits][n_heads][head_dim + 2] (scratch), then merged into out.
void launch_split_attention(const StepLayout& step, const float* q, float* partial, float* out, int n_heads,
                            int n_kv_heads, int head_dim, int window, const KvView& kv, cudaStream_t stream);
// The same attention for the tokens of step.tiles, a block per (tile, head) reading each key once per tile
// (prefill_attention.cu); only where prefill_attention_fits(head_dim) (64 or 128).
bool prefill_attention_fits(int head_dim);
void launch_prefill_attention(const StepLayout& step, const float* q, float* out, int n_heads, int n_kv_heads,
                              int head_dim, int window, const KvView& kv, cudaStream_t stream);
// The same attention for the tiles first_tile .. first_tile + n_tiles - 1 on the tensor cores in one kernel
// (flash_prefill_attention.cu: Q and P rounded to the cache's type, f32 sums), where flash_prefill_fits: a bf16 /
// f16 cache with 16-byte aligned rows, head_dim 64 or 128.
bool flash_prefill_fits(DType kv_dtype, int head_dim, int n_heads, int n_kv_heads, const KvView& kv);
void launch_flash_prefill(const StepLayout& step, int first_tile, int n_tiles, const float* q, float* out,
                          int n_heads, int n_kv_heads, int head_dim, int window, const KvView& kv,
                          cudaStream_t stream);
// dst[i] = src[rows[i]], rows of dim elements, i < n.
void launch_gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst, cudaStream_t stream);
// dst[rows[i]] += weights[i] * src[i] for i = 0 .. n-1 in order (one thread per column: repeated rows are safe).
void launch_scatter_add_rows(const float* src, const int32_t* rows, const float* weights, int n, int dim, float* dst,
                             cudaStream_t stream);
// out[r] = {the highest non-NaN value of row r of x [rows, width], first_id + the lowest column holding it}, or
// {-inf, first_id} for a row of NaN and -inf only (executors/row_best.hpp): a block per chunk of a row, then a warp
// per row over its chunks; partial holds rows * row_best_chunks(width) entries.
int row_best_chunks(int width);
void launch_row_bests(const float* x, int rows, int width, int32_t first_id, RowBest* partial, RowBest* out,
                      cudaStream_t stream);
// picks[r] = {0, tokens[r]}: a step's drawn tokens as the picks the next step's embedding reads (running ahead).
void launch_tokens_to_picks(const int32_t* tokens, int rows, RowBest* picks, cudaStream_t stream);
// Sampling rows where they are (device_sampler.cu), planned by executors/device_sampling_plan.hpp:
// out[r] = row r's token as executors/sampler.hpp draws it, or -1 where the plan leaves the row to the host
// (params[r].host: logprobs, a top-k above kDeviceSampleCandidates).
void launch_device_sampling(float* logits, int rows, int vocab, const DeviceSampleParams* params,
                            const DeviceSampleOp* ops, int32_t* out, cudaStream_t stream);
// dst[r * dst_stride + col_offset + c] = src[r * width + c].
void launch_copy_columns(const float* src, int rows, int width, float* dst, int dst_stride, int col_offset,
                         cudaStream_t stream);

}  // namespace actord::cuda
