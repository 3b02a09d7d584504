// Causal attention of one long prefill sequence on the tensor cores through cuBLAS (long_prefill_attention.cu):
// the sequence's keys and values gathered out of the paged cache into contiguous 16-bit matrices per KV head, then
// per chunk of queries S = Q K^T as one strided-batched GEMM over the KV heads (a KV head's query heads stacked:
// GQA without copies), a masked softmax of each row into 16-bit probabilities P, and O = P V as a second batched GEMM.
// Where the FMA tiles of prefill_attention.cu spend O(queries x keys x head_dim) on CUDA cores, this spends it on
// cuBLAS's tensor-core kernels and moves S and P through memory (6 bytes per query, key and head).
//
// Contract: only for a 16-bit KV cache (bf16 or f16: the GEMMs take K, V, Q and P in that type, f32 sums) and
// sequences of at least kLongPrefillTokens tokens in the step (fits()). Q is rounded to the cache's type after the
// 1/sqrt(head_dim) scale, P after normalisation: results within bf16 rounding of the f32 attention (the backend
// checks its first use against the FMA tiles and turns this path off if they differ). Scratch grows to what the
// largest call needs, capped near kScratchBytes by the query chunk.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "executors/cuda/cuda_kernels.cuh"

namespace actord::cuda {

class LongPrefillAttention {
 public:
  static bool fits(DType kv_dtype, int head_dim);

  // out rows [t0, t0 + count) (every token of sequence `seq` in this step, at positions p0 .. p0 + count - 1) from q
  // rows of the same tokens, over the sequence's keys 0 .. p0 + count - 1 in the cache (already stored).
  void run(cublasHandle_t blas, cudaStream_t stream, const StepLayout& step, int seq, int t0, int count, int p0,
           const float* q, float* out, int n_heads, int n_kv_heads, int head_dim, int window, const KvView& kv);

 private:
  static constexpr size_t kScratchBytes = size_t(768) << 20;  // S and P of one chunk
  std::shared_ptr<void> kv_, q_, s_, p_, o_;
  size_t kv_bytes_ = 0, q_bytes_ = 0, s_bytes_ = 0, p_bytes_ = 0, o_bytes_ = 0;
};

// max |a[i] - b[i]| and max |b[i]| over rows [first, first + rows) of width `width` (device pointers), downloaded:
// how the backend checks a new path against a trusted one.
void max_difference(const float* a, const float* b, int first, int rows, int width, float* host_out2,
                    cudaStream_t stream);

}  // namespace actord::cuda
