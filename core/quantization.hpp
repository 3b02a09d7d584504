// Weight-only quantization: what a topology asks for (`model.quantization`), and a matrix of integer codes with
// scales in a backend-neutral row-major form — what quantize() makes of f32/bf16/f16 weights at load time and what
// a GGUF or AWQ/GPTQ file's quantized tensors are converted to. A backend packs it into its own layout.
//
// Contract: value(r, c) = scale(r, g) * code(r, c) + offset(r, g) with g = c / group, where a symmetric matrix has
// no stored offsets and offset = -zero() * scale (zero() = 128 for 8 bits, 32 for 6, 8 for 4: codes are unsigned).
// 6-bit codes come only from files (GGUF's Q6_K): symmetric, in groups of a multiple of 16.
// Scales and offsets are f16 (what GGUF's Q8_0 / Q4_0 store; quantize() rounds a scale to f16 before it computes
// the codes, so its own matrices have no extra rounding). group divides nothing in particular: the last group of a
// row may be partial. Pure functions, no allocation beyond the result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/status.hpp"

namespace actord {

enum class QuantKind { none, int8, int4 };

// What a topology asks the loader to make of a model's matrices (model.quantization*).
struct QuantSpec {
  QuantKind kind = QuantKind::none;
  int group = 0;             // input features per scale; 0: one scale per output feature (per channel; rows longer
                             // than 32,768 get one per 32,768)
  bool zero_points = false;  // int4: a scale and an offset per group (asymmetric), else symmetric around 8
  bool enabled() const { return kind != QuantKind::none; }
};

const char* quant_kind_name(QuantKind kind);  // "none", "int8", "int4"
// "none" | "int8" | "int4"; an error for any other name.
Result<QuantKind> parse_quant_kind(std::string_view name);
// The spec checked: group 0 (per channel) or 16, 32, 64, 128, 256; zero points only with int4. The default group
// of int4 is 32 when 0 is given (per-channel int4 loses too much), of int8 0.
Result<QuantSpec> make_quant_spec(QuantKind kind, int group, bool zero_points);
std::string describe(const QuantSpec& spec);  // "int4 (groups of 32, zero points)"

// The code of value 0 in a symmetric matrix of `bits`-bit codes (unsigned, around the middle of their range).
constexpr int symmetric_zero(int bits) { return bits == 8 ? 128 : bits == 6 ? 32 : 8; }

struct QuantizedMatrix {
  int bits = 8;  // 8, 6 or 4
  int64_t rows = 0, cols = 0;
  int group = 0;                   // values per scale along a row (the last group of a row may be partial)
  std::vector<uint8_t> codes;      // [rows, cols], one unsigned code per value (6 bits: 0..63, 4 bits: 0..15)
  std::vector<uint16_t> scales;    // f16 [rows, groups()]
  std::vector<uint16_t> offsets;   // f16 [rows, groups()]; empty: symmetric
  int64_t groups() const { return group > 0 ? (cols + group - 1) / group : 0; }
  int zero() const { return symmetric_zero(bits); }
  bool affine() const { return !offsets.empty(); }
  float scale(int64_t r, int64_t g) const { return f16_to_f32(scales[r * groups() + g]); }
  float offset(int64_t r, int64_t g) const {
    return affine() ? f16_to_f32(offsets[r * groups() + g]) : -static_cast<float>(zero()) * scale(r, g);
  }
  float value(int64_t r, int64_t c) const {
    return scale(r, c / group) * codes[r * cols + c] + offset(r, c / group);
  }
  // Every value, row-major [rows, cols] (a reference, a format conversion).
  std::vector<float> dequantized() const;
  // Rows [first, first + count) and columns [col_first, col_first + col_count) (col_first a multiple of group, and
  // col_count too unless it reaches the end): a tensor-parallel shard.
  Result<QuantizedMatrix> slice(int64_t first, int64_t count, int64_t col_first, int64_t col_count) const;
  // Row r of the result is row order[r] of this one, codes, scales and offsets (order has `rows` entries).
  QuantizedMatrix with_row_order(const std::vector<int64_t>& order) const;
  // Checks sizes and code ranges (a file's tensor): an error naming what is wrong.
  Status validate() const;
};

// The row-major matrix (row_stride elements between rows, 0: cols) of f32/bf16/f16 quantized per `spec` (enabled):
// per group, int8 symmetric scale = max|w| / 127 (codes 1 .. 255); int4 symmetric scale = -m / 8 where m is the
// value of largest magnitude (m itself gets code 0, as GGUF's Q4_0), codes round(w / scale) + 8 clamped to 0..15;
// int4 with zero points offset = min and scale = (max - offset) / 15 (codes 0..15, the offset rounded to f16 first).
// A group of zeros gets scale 0.
QuantizedMatrix quantize(DType dtype, const void* data, int64_t rows, int64_t cols, int64_t row_stride,
                         const QuantSpec& spec);

}  // namespace actord
