// Element types of weights and KV caches, and their scalar conversions to and from f32.
//
// Contract: conversions are exact where the format allows (f16/bf16 -> f32) and round to nearest even the other way.
// CAF-free, allocation-free; safe from any thread.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace actord {

// i8: signed 8-bit integers. No weight is an i8 DType (quantized weights are QuantizedMatrix codes); a KV cache of
// i8 stores codes with a scale per row (core/kv_rows.hpp). Its conversions are the integers' own: to f32 exact,
// from f32 rounded to nearest even and saturated to [-128, 127].
enum class DType { f32, f16, bf16, i8 };

const char* dtype_name(DType dtype);          // "F32", "F16", "BF16", "I8" (the safetensors spelling)
size_t dtype_size(DType dtype);
// The config spelling of a dtype ("float32", "bfloat16", "float16", "int8": model.dtype, engine.kv_cache_dtype,
// config.json's torch_dtype).
const char* dtype_config_name(DType dtype);
// The floating-point dtypes: "float32"/"float"/"fp32", "bfloat16"/"bf16", "float16"/"half"/"fp16" (config spellings)
// and the safetensors names -> DType. Never i8: weights and model.dtype take only these.
std::optional<DType> parse_dtype(std::string_view name);
// A KV cache's dtype: parse_dtype's, or "int8" / "I8" (codes with a scale per row).
std::optional<DType> parse_kv_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
// Rounded to nearest even (the default rounding mode), saturated; NaN -> 0.
int8_t f32_to_i8(float f);
uint16_t f32_to_f16(float f);

// dst[i] = src[i] as f32 for n elements of `dtype` (src may be unaligned).
void convert_to_f32(DType dtype, const void* src, float* dst, size_t n);
// dst (n elements of `dtype`) = src rounded.
void convert_from_f32(DType dtype, const float* src, void* dst, size_t n);

}  // namespace actord
