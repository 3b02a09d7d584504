// GGUF tensors (core/gguf.hpp) in the forms the loader hands to a backend: float types as row-major views of the
// file, quantized types converted to a QuantizedMatrix (core/quantization.hpp).
//
// Conversions (each ggml block read as its format defines it):
//   Q8_0 -> 8-bit codes q + 128, groups of 32, the block's f16 scale                   (exact)
//   Q4_0 -> 4-bit codes, groups of 32, symmetric around 8, the block's f16 scale       (exact)
//   Q4_1 -> 4-bit codes, groups of 32, f16 scale and offset (d, m)                     (exact)
//   Q4_K -> 4-bit codes, groups of 32, scale d * sc and offset -dmin * m rounded to f16 (relative 2^-12 per weight)
//   Q6_K -> 8-bit codes q + 96, groups of 16, scale d * sc rounded to f16              (relative 2^-12 per weight)
// Other quantized types (Q5_*, Q2_K, Q3_K, Q5_K, Q8_K, Q8_1) are refused with their name.
#pragma once

#include <optional>

#include "core/dtype.hpp"
#include "core/gguf.hpp"
#include "core/quantization.hpp"
#include "core/status.hpp"

namespace actord {

// The DType of a float tensor type (F32, F16, BF16); nullopt for quantized ones.
std::optional<DType> gguf_float_dtype(GgmlType type);
// A quantized 2-D tensor ([rows, cols] = {dims[1], dims[0]}) as codes and scales; an error naming the tensor and
// its type when the type is not one of the above.
Result<QuantizedMatrix> gguf_quantized(const GgufTensor& t);
// Any tensor's values as f32 (norm weights, biases; a quantized one dequantized).
Result<std::vector<float>> gguf_values_f32(const GgufTensor& t);

}  // namespace actord
