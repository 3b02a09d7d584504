// The int4 / int8 matrices of an AWQ or GPTQ checkpoint (safetensors `X.qweight`, `X.qzeros`, `X.scales`, GPTQ's
// `X.g_idx`) as a QuantizedMatrix (core/quantization.hpp): rows = output features, cols = input features.
//
// Packings (32-bit little-endian words, code k of a word at bits [bits k, bits (k + 1))):
//   AWQ (AutoAWQ gemm): qweight [in, out / 8], word (i, c) holds outputs 8c + {0, 2, 4, 6, 1, 3, 5, 7}[k];
//        qzeros [groups, out / 8] the same; value = scale x (code - zero).
//   GPTQ (AutoGPTQ / optimum): qweight [in x bits / 32, out], word (r, o) holds inputs (32 / bits) r + k;
//        qzeros [groups, out x bits / 32], word (g, c) holds outputs (32 / bits) c + k; checkpoint_format gptq stores
//        zero - 1 (`zeros_plus_one`), gptq_v2 the zero; value = scale x (code - zero), group of input i g_idx[i].
// Scales (f16, bf16 or f32) become f16 (exact from f16); zero points become offsets -zero x scale rounded to f16, or
// none when every zero is the symmetric one (8, or 128 for 8 bits). Shapes, code ranges and g_idx are checked:
// errors name the tensor. GPTQ act-order (g_idx not i / group) is Errc::unsupported here: gptq_values() gives its
// values instead (the loader re-quantizes them to int8 in contiguous groups of 32).
#pragma once

#include <string>
#include <vector>

#include "core/quantization.hpp"
#include "core/status.hpp"
#include "memory/safetensors.hpp"

namespace actord {

struct CheckpointTensors {
  const TensorView* qweight = nullptr;
  const TensorView* qzeros = nullptr;
  const TensorView* scales = nullptr;
  const TensorView* g_idx = nullptr;  // GPTQ; may be null
};

Result<QuantizedMatrix> awq_matrix(const std::string& name, const CheckpointTensors& t, int64_t out, int64_t in,
                                   int group);
Result<QuantizedMatrix> gptq_matrix(const std::string& name, const CheckpointTensors& t, int64_t out, int64_t in,
                                    int group, int bits, bool zeros_plus_one);
// A GPTQ matrix's values [out, in] in f32, whatever its g_idx.
Result<std::vector<float>> gptq_values(const std::string& name, const CheckpointTensors& t, int64_t out, int64_t in,
                                       int group, int bits, bool zeros_plus_one);

}  // namespace actord
