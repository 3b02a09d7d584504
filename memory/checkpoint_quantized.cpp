#include "memory/checkpoint_quantized.hpp"

#include <cstring>

namespace actord {

namespace {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AWQ word position k holds output 8c + kAwqOrder[k]

uint32_t word_at(const TensorView& t, int64_t index) {
  uint32_t w = 0;
  std::memcpy(&w, t.data + index * 4, 4);
  return w;
}

Status expect(const std::string& name, const char* part, const TensorView* t, std::vector<int64_t> shape, bool int32) {
  if (!t) return make_error(Errc::not_found, name + "." + part + " is missing");
  if (t->int32 != int32 || t->shape != shape) {
    std::string want, got;
    for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (int64_t d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return make_error(Errc::parse_error, name + "." + part + ": expected " + (int32 ? "I32" : "float") + " [" + want +
                                             "], found " + (t->int32 ? "I32" : dtype_name(t->dtype)) + " [" + got + "]");
  }
  return Status::success();
}

// The scales as f16 words [groups, out], and the zero points [groups, out] given by `zero_of(g, o)`: a matrix
// with those, codes from `code_of(o, i)`.
template <class ZeroOf, class CodeOf>
QuantizedMatrix assemble(const TensorView& scales, int64_t out, int64_t in, int group, int bits, ZeroOf zero_of,
                         CodeOf code_of) {
  QuantizedMatrix q;
  q.bits = bits;
  q.rows = out;
  q.cols = in;
  q.group = group;
  const int64_t groups = q.groups();
  q.codes.resize(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) q.codes[static_cast<size_t>(o * in + i)] = code_of(o, i);
  std::vector<float> s(static_cast<size_t>(groups * out));
  convert_to_f32(scales, s.data());
  q.scales.resize(static_cast<size_t>(out * groups));
  bool symmetric = true;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t o = 0; o < out; ++o) symmetric = symmetric && zero_of(g, o) == q.zero();
  if (!symmetric) q.offsets.resize(q.scales.size());
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = s[static_cast<size_t>(g * out + o)];
      const size_t at = static_cast<size_t>(o * groups + g);
      q.scales[at] = f32_to_f16(scale);
      if (!symmetric) q.offsets[at] = f32_to_f16(-static_cast<float>(zero_of(g, o)) * f16_to_f32(q.scales[at]));
    }
  }
  return q;
}

}  // namespace

Result<QuantizedMatrix> awq_matrix(const std::string& name, const CheckpointTensors& t, int64_t out, int64_t in,
                                   int group) {
  if (group <= 0) group = static_cast<int>(in);
  if (out % 8 != 0 || in % group != 0) {
    return make_error(Errc::parse_error, name + ": AWQ needs outputs in eights and inputs in whole groups of " +
                                             std::to_string(group) + ", got [" + std::to_string(out) + ", " +
                                             std::to_string(in) + "]");
  }
  const int64_t groups = in / group;
  ACTORD_TRY_STATUS(expect(name, "qweight", t.qweight, {in, out / 8}, true));
  ACTORD_TRY_STATUS(expect(name, "qzeros", t.qzeros, {groups, out / 8}, true));
  ACTORD_TRY_STATUS(expect(name, "scales", t.scales, {groups, out}, false));
  auto nibble = [](const TensorView& v, int64_t row, int64_t out_total, int64_t o) {
    const uint32_t w = word_at(v, row * (out_total / 8) + o / 8);
    int k = 0;
    while (kAwqOrder[k] != o % 8) ++k;
    return static_cast<uint8_t>((w >> (4 * k)) & 0xF);
  };
  return assemble(*t.scales, out, in, group, 4, [&](int64_t g, int64_t o) { return int(nibble(*t.qzeros, g, out, o)); },
                  [&](int64_t o, int64_t i) { return nibble(*t.qweight, i, out, o); });
}

namespace {

struct GptqLayout {
  int per_word;  // codes per 32-bit word
  unsigned mask;
};

Status check_gptq(const std::string& name, const CheckpointTensors& t, int64_t out, int64_t in, int group, int bits) {
  if (bits != 4 && bits != 8) return make_error(Errc::unsupported, name + ": GPTQ with " + std::to_string(bits) + " bits");
  const int per_word = 32 / bits;
  if (in % per_word != 0 || out % per_word != 0 || in % group != 0) {
    return make_error(Errc::parse_error, name + ": GPTQ shape [" + std::to_string(out) + ", " + std::to_string(in) +
                                             "] does not pack into words of " + std::to_string(per_word) +
                                             " codes and groups of " + std::to_string(group));
  }
  const int64_t groups = in / group;
  ACTORD_TRY_STATUS(expect(name, "qweight", t.qweight, {in / per_word, out}, true));
  ACTORD_TRY_STATUS(expect(name, "qzeros", t.qzeros, {groups, out / per_word}, true));
  ACTORD_TRY_STATUS(expect(name, "scales", t.scales, {groups, out}, false));
  if (t.g_idx) {
    ACTORD_TRY_STATUS(expect(name, "g_idx", t.g_idx, {in}, true));
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = static_cast<int32_t>(word_at(*t.g_idx, i));
      if (g < 0 || g >= groups) {
        return make_error(Errc::parse_error, name + ".g_idx[" + std::to_string(i) + "] = " + std::to_string(g) +
                                                 " is not a group (" + std::to_string(groups) + ")");
      }
    }
  }
  return Status::success();
}

}  // namespace

Result<QuantizedMatrix> gptq_matrix(const std::string& name, const CheckpointTensors& t, int64_t out, int64_t in,
                                    int group, int bits, bool zeros_plus_one) {
  if (group <= 0) group = static_cast<int>(in);
  ACTORD_TRY_STATUS(check_gptq(name, t, out, in, group, bits));
  if (t.g_idx) {
    for (int64_t i = 0; i < in; ++i) {
      if (static_cast<int32_t>(word_at(*t.g_idx, i)) != i / group) {
        return make_error(Errc::unsupported, name + ": act-order g_idx (input " + std::to_string(i) +
                                                 " is not in group " + std::to_string(i / group) + ")");
      }
    }
  }
  const int per_word = 32 / bits;
  const unsigned mask = (1u << bits) - 1;
  auto zero = [&](int64_t g, int64_t o) {
    const uint32_t w = word_at(*t.qzeros, g * (out / per_word) + o / per_word);
    return static_cast<int>((w >> (bits * (o % per_word))) & mask) + (zeros_plus_one ? 1 : 0);
  };
  auto code = [&](int64_t o, int64_t i) {
    const uint32_t w = word_at(*t.qweight, (i / per_word) * out + o);
    return static_cast<uint8_t>((w >> (bits * (i % per_word))) & mask);
  };
  return assemble(*t.scales, out, in, group, bits, zero, code);
}

Result<std::vector<float>> gptq_values(const std::string& name, const CheckpointTensors& t, int64_t out, int64_t in,
                                       int group, int bits, bool zeros_plus_one) {
  if (group <= 0) group = static_cast<int>(in);
  ACTORD_TRY_STATUS(check_gptq(name, t, out, in, group, bits));
  const int per_word = 32 / bits;
  const unsigned mask = (1u << bits) - 1;
  const int64_t groups = in / group;
  std::vector<float> s(static_cast<size_t>(groups * out)), values(static_cast<size_t>(out * in));
  convert_to_f32(*t.scales, s.data());
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = t.g_idx ? static_cast<int32_t>(word_at(*t.g_idx, i)) : i / group;
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t wz = word_at(*t.qzeros, g * (out / per_word) + o / per_word);
      const int z = static_cast<int>((wz >> (bits * (o % per_word))) & mask) + (zeros_plus_one ? 1 : 0);
      const int q = static_cast<int>((word_at(*t.qweight, (i / per_word) * out + o) >> (bits * (i % per_word))) & mask);
      values[static_cast<size_t>(o * in + i)] = s[static_cast<size_t>(g * out + o)] * static_cast<float>(q - z);
    }
  }
  return values;
}

}  // namespace actord
