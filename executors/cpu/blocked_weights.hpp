// The blocked weight layout: a weight matrix rearranged once, at load time, so that the GEMM reads it as one
// sequential stream and converts it to f32 in registers with one or two instructions per 16 values.
//
// Layout (WeightLayout::blocked, same dtype and same bytes per value as the row-major original): the n output
// features go in blocks of kBlockCols = 32 rows (the last block padded with zeros); block b stores, for each input
// feature t = 0 .. k-1 in order, the 32 values W[32b + c, t] together (32 * dtype_size bytes per t):
//   f32, f16: column c at position c;
//   bf16:     paired, so that a 32-bit AND keeps one value and a 16-bit shift the other, each an exact f32:
//             32-bit word l (l = 0 .. 15) holds W[32b + l, t] in its upper half and W[32b + 16 + l, t] in its lower.
// A block of 32 x k values is contiguous; blocks follow each other in order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "executors/cpu/gemm.hpp"

namespace actord::cpu {

constexpr int kBlockCols = 32;

// Bytes of x the blocked GEMM sweeps against one weight block at a time: half of this CPU's L2 (read once from
// sysfs; 512 KiB when unknown), so that the rows stay in L2 while the block streams past them.
int64_t x_chunk_bytes();

// Bytes of the blocked form of a rows x cols matrix of `dtype` (rows rounded up to whole blocks).
size_t blocked_bytes(DType dtype, int64_t rows, int64_t cols);

// Writes `src` (row-major, any row stride) into `dst` (blocked_bytes() bytes) and returns the view of it. Values are
// copied bit for bit.
WeightMatrix pack_blocked(const WeightMatrix& src, void* dst);

// A gated MLP's gate and up projections ([ff, k] each, same dtype) fused into one blocked matrix for gemm_nt_glu:
// block b holds gate rows [16b, 16b + 16) as its columns 0..15 and the same rows of up as columns 16..31 (zeros past
// ff), so one register block yields both halves of 16 outputs. glu_bytes() bytes; rows() of the view is
// 32 * ceil(ff / 16).
size_t glu_bytes(DType dtype, int64_t ff, int64_t cols);
WeightMatrix pack_glu(const WeightMatrix& gate, const WeightMatrix& up, void* dst);

// out[c] = W[row, c] as f32, for either layout (an embedding lookup in a tied lm_head, tests).
void weight_row_to_f32(const WeightMatrix& w, int64_t row, float* out);

class ThreadPool;

// y[m, ff] = silu(x Gᵀ) ⊙ (x Uᵀ), the gated MLP's first half in one pass, over a pack_glu() matrix (no bias);
// fused rows split over the pool. Matches silu_mul(gemm_nt(x, G), gemm_nt(x, U)) up to rounding.
void gemm_nt_glu(const float* x, const WeightMatrix& gate_up, int64_t ff, float* y, int m, ThreadPool& pool,
                 Isa isa = Isa::automatic);

// Per-ISA products over a blocked matrix, output features [n_begin, n_end) with n_begin a multiple of kBlockCols;
// internal to gemm.cpp and its tests.
void gemm_nt_blocked_portable(const float* x, int m, const WeightMatrix& w, const float* bias, float* y,
                              int64_t n_begin, int64_t n_end);
void gemm_nt_blocked_avx2(const float* x, int m, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                          int64_t n_end);
void gemm_nt_blocked_avx512(const float* x, int m, const WeightMatrix& w, const float* bias, float* y,
                            int64_t n_begin, int64_t n_end);
// y[:, n_begin/2 : n_end/2] = silu(x Gᵀ) * (x Uᵀ) over a pack_glu() matrix; y has ff columns, [n_begin, n_end) are
// fused rows (multiples of kBlockCols, or the end).
void gemm_nt_glu_portable(const float* x, int m, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                          int64_t n_end);
void gemm_nt_glu_avx2(const float* x, int m, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                      int64_t n_end);
void gemm_nt_glu_avx512(const float* x, int m, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                        int64_t n_end);

}  // namespace actord::cpu
