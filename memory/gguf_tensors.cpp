#include "memory/gguf_tensors.hpp"

#include <cstring>
#include <string>

namespace actord {

namespace {

uint16_t half_at(const unsigned char* p) {
  uint16_t h = 0;
  std::memcpy(&h, p, 2);
  return h;
}

// Q4_K's 6-bit scale and min of sub-block j (0..7) from its 12 packed bytes.
void q4k_scale_min(const unsigned char* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

QuantizedMatrix shaped(const GgufTensor& t, int bits, int group, bool affine) {
  QuantizedMatrix q;
  q.bits = bits;
  q.rows = t.rows();
  q.cols = t.cols();
  q.group = group;
  q.codes.resize(static_cast<size_t>(q.rows * q.cols));
  q.scales.resize(static_cast<size_t>(q.rows * q.groups()));
  if (affine) q.offsets.resize(q.scales.size());
  return q;
}

}  // namespace

std::optional<DType> gguf_float_dtype(GgmlType type) {
  switch (type) {
    case GgmlType::f32: return DType::f32;
    case GgmlType::f16: return DType::f16;
    case GgmlType::bf16: return DType::bf16;
    default: return std::nullopt;
  }
}

Result<QuantizedMatrix> gguf_quantized(const GgufTensor& t) {
  const auto block = ggml_block(static_cast<uint32_t>(t.type));
  const int64_t blocks = t.elements() / block->elements;
  const unsigned char* p = t.data;
  switch (t.type) {
    case GgmlType::q8_0: {
      QuantizedMatrix q = shaped(t, 8, 32, false);
      for (int64_t b = 0; b < blocks; ++b, p += 34) {
        q.scales[b] = half_at(p);
        for (int j = 0; j < 32; ++j) q.codes[b * 32 + j] = static_cast<uint8_t>(static_cast<int8_t>(p[2 + j]) + 128);
      }
      return q;
    }
    case GgmlType::q4_0:
    case GgmlType::q4_1: {
      const bool affine = t.type == GgmlType::q4_1;
      const int header = affine ? 4 : 2;
      QuantizedMatrix q = shaped(t, 4, 32, affine);
      for (int64_t b = 0; b < blocks; ++b, p += header + 16) {
        q.scales[b] = half_at(p);
        if (affine) q.offsets[b] = half_at(p + 2);
        for (int j = 0; j < 16; ++j) {
          q.codes[b * 32 + j] = p[header + j] & 0x0F;
          q.codes[b * 32 + 16 + j] = p[header + j] >> 4;
        }
      }
      return q;
    }
    case GgmlType::q5_0:
    case GgmlType::q5_1: {
      // 5-bit codes (low nibbles in qs, the fifth bits in the 32-bit qh): Q5_0 d (q - 16) as 6-bit codes q + 16
      // around zero() = 32; Q5_1 d q + m as 8-bit codes q with the offset m (6-bit codes are symmetric only).
      const bool affine = t.type == GgmlType::q5_1;
      const int header = affine ? 4 : 2;
      QuantizedMatrix q = shaped(t, affine ? 8 : 6, 32, affine);
      for (int64_t b = 0; b < blocks; ++b, p += header + 20) {
        q.scales[b] = half_at(p);
        if (affine) q.offsets[b] = half_at(p + 2);
        uint32_t qh = 0;
        std::memcpy(&qh, p + header, 4);
        const unsigned char* qs = p + header + 4;
        const int shift = affine ? 0 : 16;
        for (int j = 0; j < 16; ++j) {
          q.codes[b * 32 + j] = static_cast<uint8_t>(((qs[j] & 0x0F) | ((qh >> j) & 1) << 4) + shift);
          q.codes[b * 32 + 16 + j] = static_cast<uint8_t>(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) + shift);
        }
      }
      return q;
    }
    case GgmlType::q4_k: {
      QuantizedMatrix q = shaped(t, 4, 32, true);
      for (int64_t b = 0; b < blocks; ++b, p += 144) {
        const float d = f16_to_f32(half_at(p)), dmin = f16_to_f32(half_at(p + 2));
        const unsigned char* packed = p + 4;
        const unsigned char* qs = p + 16;
        for (int chunk = 0; chunk < 4; ++chunk) {  // 64 values: sub-blocks 2 chunk (low nibbles), 2 chunk + 1 (high)
          for (int half = 0; half < 2; ++half) {
            const int sub = 2 * chunk + half;
            int scale = 0, min = 0;
            q4k_scale_min(packed, sub, &scale, &min);
            const int64_t g = b * 8 + sub;
            q.scales[g] = f32_to_f16(d * static_cast<float>(scale));
            q.offsets[g] = f32_to_f16(-dmin * static_cast<float>(min));
            for (int l = 0; l < 32; ++l) {
              const unsigned char byte = qs[32 * chunk + l];
              q.codes[g * 32 + l] = half ? byte >> 4 : byte & 0x0F;
            }
          }
        }
      }
      return q;
    }
    case GgmlType::q6_k: {
      QuantizedMatrix q = shaped(t, 6, 16, false);
      for (int64_t b = 0; b < blocks; ++b, p += 210) {
        const unsigned char* ql = p;
        const unsigned char* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = f16_to_f32(half_at(p + 208));
        uint8_t* codes = q.codes.data() + b * 256;
        for (int half = 0; half < 2; ++half) {  // 128 values: ql[64], qh[32], scales[8] each
          const unsigned char* l_ = ql + 64 * half;
          const unsigned char* h_ = qh + 32 * half;
          uint8_t* c = codes + 128 * half;
          for (int l = 0; l < 32; ++l) {
            const int q1 = (l_[l] & 0x0F) | ((h_[l] & 3) << 4);
            const int q2 = (l_[l + 32] & 0x0F) | (((h_[l] >> 2) & 3) << 4);
            const int q3 = (l_[l] >> 4) | (((h_[l] >> 4) & 3) << 4);
            const int q4 = (l_[l + 32] >> 4) | (((h_[l] >> 6) & 3) << 4);
            c[l] = static_cast<uint8_t>(q1);  // value d * sc * (q - 32): 6-bit codes around zero() = 32
            c[l + 32] = static_cast<uint8_t>(q2);
            c[l + 64] = static_cast<uint8_t>(q3);
            c[l + 96] = static_cast<uint8_t>(q4);
          }
          for (int s = 0; s < 8; ++s) q.scales[b * 16 + 8 * half + s] = f32_to_f16(d * static_cast<float>(sc[8 * half + s]));
        }
      }
      return q;
    }
    default:
      return make_error(Errc::unsupported, "tensor " + t.name + " is " + ggml_type_name(t.type) +
                                               ", which actord does not load (supported: F32, F16, BF16, Q8_0, Q4_0, "
                                               "Q4_1, Q4_K, Q6_K)");
  }
}

Result<std::vector<float>> gguf_values_f32(const GgufTensor& t) {
  if (const auto dtype = gguf_float_dtype(t.type)) {
    std::vector<float> out(static_cast<size_t>(t.elements()));
    convert_to_f32(*dtype, t.data, out.data(), out.size());
    return out;
  }
  auto q = gguf_quantized(t);
  if (!q) return q.error();
  return q->dequantized();
}

}  // namespace actord
