#include "core/dtype.hpp"

#include <algorithm>
#include <cmath>

namespace actord {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i8: return "I8";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::i8: return 1;
  }
  return 0;
}

const char* dtype_config_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::i8: return "int8";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "float32" || name == "float" || name == "fp32" || name == "F32") return DType::f32;
  if (name == "bfloat16" || name == "bf16" || name == "BF16") return DType::bf16;
  if (name == "float16" || name == "half" || name == "fp16" || name == "F16") return DType::f16;
  return std::nullopt;
}

std::optional<DType> parse_kv_dtype(std::string_view name) {
  if (name == "int8" || name == "I8") return DType::i8;
  return parse_dtype(name);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;            // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;           // overflow (rounds to inf) or inf
  if (abs < 0x38800000u) {                                // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;                   // rounds to zero
    const uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const int shift = 126 - static_cast<int>(exp);        // value / 2^-24, the f16 subnormal unit
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t v = abs - (112u << 23);                        // rebias exponent 127 -> 15
  v += 0xfffu + ((v >> 13) & 1u);                         // round to nearest even
  return static_cast<uint16_t>(sign | (v >> 13));
}

namespace {

// The 16-bit formats differ only in their scalar conversion.
template <class ToF32>
void halves_to_f32(const unsigned char* p, float* dst, size_t n, ToF32 to_f32) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = to_f32(h);
  }
}

template <class FromF32>
void f32_to_halves(const float* src, unsigned char* p, size_t n, FromF32 from_f32) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = from_f32(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

}  // namespace

int8_t f32_to_i8(float f) {
  if (!(f == f)) return 0;  // NaN
  return static_cast<int8_t>(std::clamp(std::nearbyint(f), -128.0f, 127.0f));
}

void convert_to_f32(DType dtype, const void* src, float* dst, size_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (dtype) {
    case DType::f32: if (n) std::memcpy(dst, src, n * 4); return;  // an empty vector's data() may be null
    case DType::f16: halves_to_f32(p, dst, n, f16_to_f32); return;
    case DType::bf16: halves_to_f32(p, dst, n, bf16_to_f32); return;
    case DType::i8:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(p[i]));
      return;
  }
}

void convert_from_f32(DType dtype, const float* src, void* dst, size_t n) {
  auto* p = static_cast<unsigned char*>(dst);
  switch (dtype) {
    case DType::f32: if (n) std::memcpy(dst, src, n * 4); return;
    case DType::f16: f32_to_halves(src, p, n, f32_to_f16); return;
    case DType::bf16: f32_to_halves(src, p, n, f32_to_bf16); return;
    case DType::i8:
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(f32_to_i8(src[i]));
      return;
  }
}

}  // namespace actord
