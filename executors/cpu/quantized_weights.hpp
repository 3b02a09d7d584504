// The quantized blocked layout (WeightLayout::quantized): a QuantizedMatrix (core/quantization.hpp) rearranged once,
// at load time, so that the GEMM streams it in order and dequantizes in registers, with f32 activations (FMA) or
// with int8 activations quantized per row (AVX512-VNNI dot products).
//
// Layout: output features in blocks of kBlockCols = 32 (the last padded with zero codes and scales), as the blocked
// layout (blocked_weights.hpp). Each row's cols go in groups of `group` values, padded to group_stride(), a multiple
// of 8 (cols_padded() = groups * group_stride()). A block stores, for each group in order:
//   codes:   group_stride / F chunks of 128 bytes, F = 4 features (8 bits) or 8 features (4 bits); chunk j holds
//            one 32-bit word per column c = 0..31 (column c at byte 4c): 8 bits: byte b = code of feature
//            F j + b; 4 bits: byte b = code of feature F j + b (low nibble) | code of F j + 4 + b (high nibble).
//            So a word is four 8-bit codes of consecutive features, as vpdpbusd reads them.
//            6 bits (group_stride a multiple of 16): per 16 features 16 j .. 16 j + 15 three chunks, the first two
//            the low four bits of features 16 j .. + 7 and 16 j + 8 .. + 15 as the 4-bit chunks, the third their
//            high two bits: byte b of column c's word = bits 0-1 of feature 16 j + b, 2-3 of 16 j + 4 + b, 4-5 of
//            16 j + 8 + b, 6-7 of 16 j + 12 + b (each nibble plane's high bits at one shift of the word).
//   scales:  32 f16 (column c at 2c), 64 bytes;
//   offsets: 32 f16, 64 bytes, only when affine (else offset = -zero * scale).
// Padding features carry code 0: the kernels pad x with zeros to cols_padded(), so they add nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/quantization.hpp"
#include "executors/cpu/gemm.hpp"

namespace actord::cpu {

// The quantized parts of a WeightMatrix's description.
inline int64_t quant_group_stride(const WeightMatrix& w) { return (w.quant.group + 7) / 8 * 8; }
inline int64_t quant_groups(const WeightMatrix& w) { return (w.cols + w.quant.group - 1) / w.quant.group; }
inline int64_t quant_cols_padded(const WeightMatrix& w) { return quant_groups(w) * quant_group_stride(w); }
// Bytes of one group's codes in one block (its scales follow them), of the whole group (codes, scales, offsets) and of
// one block.
int64_t quant_codes_bytes(const WeightMatrix& w);
int64_t quant_group_bytes(const WeightMatrix& w);
inline int64_t quant_block_bytes(const WeightMatrix& w) { return quant_groups(w) * quant_group_bytes(w); }

size_t quantized_bytes(const QuantizedMatrix& q);
// Writes `q` into `dst` (quantized_bytes() bytes) and returns the view of it (dtype f16: the scales').
WeightMatrix pack_quantized(const QuantizedMatrix& q, void* dst);
// Gate and up ([ff, k] each, same bits, group and symmetry) fused as pack_glu fuses them (blocked_weights.hpp):
// block b holds gate rows [16b, +16) as columns 0..15 and up's as 16..31.
size_t quantized_glu_bytes(const QuantizedMatrix& gate);
WeightMatrix pack_quantized_glu(const QuantizedMatrix& gate, const QuantizedMatrix& up, void* dst);

// out[c] = W[row, c] dequantized (an embedding lookup in a tied lm_head, tests).
void quantized_row_to_f32(const WeightMatrix& w, int64_t row, float* out);

// x prepared once for the products of one weight description: rows padded with zeros to cols_padded() (`x`, ld
// apart), and per (row, group) the sum of the row's values over the group (f32 path: `sums`; VNNI path: `codes`,
// the rows quantized to int8 with one scale per row, `row_scales`, and integer sums `code_sums`).
struct QuantizedX {
  int m = 0;
  int64_t ld = 0;       // cols_padded
  int64_t groups = 0;
  int64_t group_stride = 0;
  const float* x = nullptr;
  const float* sums = nullptr;          // [m, groups]
  const int8_t* codes = nullptr;        // [m, ld]
  const float* row_scales = nullptr;    // [m]
  const int32_t* code_sums = nullptr;   // [m, groups]
};
// For the f32 path (portable) and the int8 one (every x86 ISA). Storage is this thread's (valid until its next
// call with the same `slot`).
QuantizedX quantized_x_f32(const float* x, int m, const WeightMatrix& w, int slot);
QuantizedX quantized_x_int8(const float* x, int m, const WeightMatrix& w, int slot);
// The int8 rows of quantized_x_int8 (AVX-512 when the CPU has it): codes[i, t] = round(x[i, t] / s_i), s_i =
// max |x[i]| / 127, zero past k.
void quantize_rows_int8(const float* x, int m, int64_t k, int64_t ld, int8_t* codes, float* scales);
void quantize_rows_int8_avx512(const float* x, int m, int64_t k, int64_t ld, int8_t* codes, float* scales);
void quantize_rows_int8_avx2(const float* x, int m, int64_t k, int64_t ld, int8_t* codes, float* scales);

// Per-ISA products: y[:, n_begin .. n_end) (n_begin a multiple of kBlockCols) plain (+ bias), or with glu the gated
// outputs of a pack_quantized_glu matrix (ff of them; [n_begin, n_end) fused rows).
void gemm_nt_quantized_portable(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                int64_t ff_glu, int64_t n_begin, int64_t n_end);
// Whether gemm_nt & co. multiply quantized weights by int8 activations on `isa` (every x86 ISA, avx2 on) rather than
// by f32 ones (portable).
bool quantized_int8_activations(Isa isa);
// int8 activations (quantized_x_int8) with AVX512-VNNI or AVX-VNNI dot products (gemm_quantized_int8.inl).
void gemm_nt_quantized_avx512_vnni(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                   int64_t ff_glu, int64_t n_begin, int64_t n_end);
void gemm_nt_quantized_avx_vnni(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                int64_t ff_glu, int64_t n_begin, int64_t n_end);
// The same products without VNNI (vpmaddubsw + vpmaddwd): AVX2 (gemm_avx2.cpp), AVX-512 (gemm_avx512.cpp).
void gemm_nt_quantized_avx2_int8(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                 int64_t ff_glu, int64_t n_begin, int64_t n_end);
void gemm_nt_quantized_avx512_int8(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                   int64_t ff_glu, int64_t n_begin, int64_t n_end);

}  // namespace actord::cpu
