// Branch-free scalar math that the compiler vectorises inside `#pragma omp simd` loops (libm's expf is a call per
// element and blocks vectorisation). Header-only: each ISA instance compiles it with its own flags.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace actord::cpu {

// e^x for x <= 0 (softmax arguments; -inf gives 0), relative error < 3e-7. Cody-Waite range reduction and a
// degree-6 polynomial, branch-free so that loops over it vectorise (libm's expf is a call per element).
inline float exp_nonpositive(float x) {
  // Selections are bit operations, not branches or float compares: GCC vectorises neither of those for SSE2.
  // x < -87 (-inf included) <=> its bits, as unsigned, exceed those of -87.0f (so does a NaN with the sign bit
  // set, which gives 0); keep is all ones elsewhere.
  const uint32_t bits_x = std::bit_cast<uint32_t>(x);
  const uint32_t keep = 0u - static_cast<uint32_t>(bits_x <= 0xC2AE0000u);
  x = std::bit_cast<float>((bits_x & keep) | (0xC2AE0000u & ~keep));  // max(x, -87)
  // Round to nearest by adding and subtracting 1.5 * 2^23 (|x * log2 e| < 126): same result as nearbyint, but it
  // vectorises on every instruction set (SSE2 has no rounding instruction).
  constexpr float kRound = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  // n as an integer, read from the low mantissa bits of `shifted` (its exponent is kRound's for |n| < 2^22): no
  // float-to-int conversion, which is undefined for a NaN argument.
  const uint32_t n_int = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRound);
  float r = x - n * 0.693359375f;
  r -= n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = (n_int + 127u) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p * scale) & keep);
}

// sigmoid(x) through e = exp(-|x|), so that the exponential never overflows.
inline float sigmoid(float x) {
  const float e = exp_nonpositive(-std::fabs(x));
  const float negative = static_cast<float>(std::bit_cast<uint32_t>(x) >> 31);  // 1 for x < 0 (and -0)
  // sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below; both products are exact, so is their sum.
  const float numerator = negative * e + (1.0f - negative);
  return numerator / (1.0f + e);
}

// silu(g) = g * sigmoid(g).
inline float silu(float g) { return g * sigmoid(g); }

// tanh(x) through e = exp(-2|x|): sign(x) (1 - e) / (1 + e), branch-free.
inline float tanh_fast(float x) {
  const float e = exp_nonpositive(-2.0f * std::fabs(x));
  const float t = (1.0f - e) / (1.0f + e);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(t) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
}

// GELU, tanh approximation (HF's gelu_pytorch_tanh): 0.5 g (1 + tanh(u)), u = sqrt(2 / pi) (g + 0.044715 g^3), computed
// as g * sigmoid(2u) (the same function).
inline float gelu_tanh(float g) { return g * sigmoid(1.5957691216f * (g + 0.044715f * g * g * g)); }

// cap tanh(x / cap), inv = 1 / cap (Gemma 2's cap of scores and logits).
inline float softcap(float x, float cap, float inv) { return cap * tanh_fast(x * inv); }

}  // namespace actord::cpu
