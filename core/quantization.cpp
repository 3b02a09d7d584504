#include "core/quantization.hpp"

#include <algorithm>
#include <cmath>

namespace actord {

const char* quant_kind_name(QuantKind kind) {
  switch (kind) {
    case QuantKind::none: return "none";
    case QuantKind::int8: return "int8";
    case QuantKind::int4: return "int4";
  }
  return "?";
}

Result<QuantKind> parse_quant_kind(std::string_view name) {
  for (QuantKind kind : {QuantKind::none, QuantKind::int8, QuantKind::int4}) {
    if (name == quant_kind_name(kind)) return kind;
  }
  return make_error(Errc::invalid_config, "unknown quantization '" + std::string(name) + "' (known: none, int8, int4)");
}

Result<QuantSpec> make_quant_spec(QuantKind kind, int group, bool zero_points) {
  QuantSpec spec{kind, group, zero_points};
  if (kind == QuantKind::none) return QuantSpec{};
  if (group != 0 && group != 16 && group != 32 && group != 64 && group != 128 && group != 256) {
    return make_error(Errc::invalid_config,
                      "quantization group must be 0 (per channel), 16, 32, 64, 128 or 256, got " + std::to_string(group));
  }
  if (zero_points && kind != QuantKind::int4) {
    return make_error(Errc::invalid_config, "zero points are for int4 only (int8 is symmetric)");
  }
  if (kind == QuantKind::int4 && spec.group == 0) spec.group = 32;
  return spec;
}

std::string describe(const QuantSpec& spec) {
  if (!spec.enabled()) return "none";
  std::string out = quant_kind_name(spec.kind);
  out += spec.group ? " (groups of " + std::to_string(spec.group) : " (per channel";
  if (spec.zero_points) out += ", zero points";
  return out + ")";
}

std::vector<float> QuantizedMatrix::dequantized() const {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = value(r, c);
  return out;
}

Result<QuantizedMatrix> QuantizedMatrix::slice(int64_t first, int64_t count, int64_t col_first,
                                               int64_t col_count) const {
  const bool cols_ok = col_first % group == 0 && (col_count % group == 0 || col_first + col_count == cols);
  if (first < 0 || count <= 0 || first + count > rows || col_first < 0 || col_count <= 0 ||
      col_first + col_count > cols || !cols_ok) {
    return make_error(Errc::invalid_argument,
                      "quantized shard rows [" + std::to_string(first) + ", +" + std::to_string(count) + ") cols [" +
                          std::to_string(col_first) + ", +" + std::to_string(col_count) + ") of [" +
                          std::to_string(rows) + ", " + std::to_string(cols) + "] does not fall on groups of " +
                          std::to_string(group));
  }
  QuantizedMatrix out;
  out.bits = bits;
  out.rows = count;
  out.cols = col_count;
  out.group = group == cols ? static_cast<int>(col_count) : group;  // per channel stays per channel
  const int64_t g_first = col_first / group, g_count = out.groups(), g_all = groups();
  out.codes.resize(static_cast<size_t>(count * col_count));
  out.scales.resize(static_cast<size_t>(count * g_count));
  if (affine()) out.offsets.resize(out.scales.size());
  for (int64_t r = 0; r < count; ++r) {
    std::copy_n(codes.begin() + (first + r) * cols + col_first, col_count, out.codes.begin() + r * col_count);
    std::copy_n(scales.begin() + (first + r) * g_all + g_first, g_count, out.scales.begin() + r * g_count);
    if (affine()) {
      std::copy_n(offsets.begin() + (first + r) * g_all + g_first, g_count, out.offsets.begin() + r * g_count);
    }
  }
  return out;
}

QuantizedMatrix QuantizedMatrix::with_row_order(const std::vector<int64_t>& order) const {
  QuantizedMatrix out = *this;
  const auto move_rows = [&](const auto& from, auto& to, int64_t per_row) {
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(from.begin() + order[static_cast<size_t>(r)] * per_row, per_row, to.begin() + r * per_row);
  };
  move_rows(codes, out.codes, cols);
  move_rows(scales, out.scales, groups());
  if (affine()) move_rows(offsets, out.offsets, groups());
  return out;
}

Status QuantizedMatrix::validate() const {
  if (bits != 8 && bits != 6 && bits != 4) return make_error(Errc::invalid_argument, "quantized bits must be 8, 6 or 4");
  if (rows <= 0 || cols <= 0 || group <= 0) return make_error(Errc::invalid_argument, "empty quantized matrix");
  const size_t n_scales = static_cast<size_t>(rows * groups());
  if (codes.size() != static_cast<size_t>(rows * cols) || scales.size() != n_scales ||
      (!offsets.empty() && offsets.size() != n_scales)) {
    return make_error(Errc::invalid_argument, "quantized matrix sizes do not match its shape");
  }
  if (bits == 6 && (group % 16 != 0 || !offsets.empty())) {
    return make_error(Errc::invalid_argument, "6-bit codes need symmetric groups of a multiple of 16");
  }
  const uint8_t top = bits == 8 ? 255 : bits == 6 ? 63 : 15;
  if (std::any_of(codes.begin(), codes.end(), [top](uint8_t c) { return c > top; })) {
    return make_error(Errc::invalid_argument, std::to_string(bits) + "-bit codes above " + std::to_string(top));
  }
  return {};
}

namespace {

uint16_t f16_rounded(float v, float* as_f32) {
  const uint16_t h = f32_to_f16(v);
  *as_f32 = f16_to_f32(h);
  return h;
}

}  // namespace

QuantizedMatrix quantize(DType dtype, const void* data, int64_t rows, int64_t cols, int64_t row_stride,
                         const QuantSpec& spec) {
  ACTORD_CHECK(spec.enabled() && rows > 0 && cols > 0);
  QuantizedMatrix q;
  q.bits = spec.kind == QuantKind::int8 ? 8 : 4;
  q.rows = rows;
  q.cols = cols;
  // Per channel: one group of the whole row, up to 32,768 values (the VNNI kernels sum a group's 8-bit products in
  // int32: 32,768 x 255 x 127 stays far below 2^31).
  q.group = static_cast<int>(std::min<int64_t>(spec.group > 0 ? spec.group : 32768, cols));
  const int64_t groups = q.groups();
  q.codes.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(rows * groups));
  if (spec.zero_points) q.offsets.resize(q.scales.size());
  const int64_t stride = row_stride ? row_stride : cols;
  const auto* base = static_cast<const unsigned char*>(data);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    convert_to_f32(dtype, base + r * stride * static_cast<int64_t>(dtype_size(dtype)), row.data(),
                   static_cast<size_t>(cols));
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * q.group, c1 = std::min(cols, c0 + q.group);
      uint8_t* codes = q.codes.data() + r * cols;
      uint16_t& scale_out = q.scales[static_cast<size_t>(r * groups + g)];
      float scale = 0.0f;
      if (spec.zero_points) {
        const auto [lo, hi] = std::minmax_element(row.begin() + c0, row.begin() + c1);
        float offset = 0.0f;
        q.offsets[static_cast<size_t>(r * groups + g)] = f16_rounded(*lo, &offset);
        scale_out = f16_rounded((*hi - offset) / 15.0f, &scale);
        for (int64_t c = c0; c < c1; ++c) {
          const float code = scale > 0.0f ? std::nearbyint((row[c] - offset) / scale) : 0.0f;
          codes[c] = static_cast<uint8_t>(std::clamp(code, 0.0f, 15.0f));
        }
        continue;
      }
      float extreme = 0.0f;  // the value of largest magnitude
      for (int64_t c = c0; c < c1; ++c) {
        if (std::fabs(row[c]) > std::fabs(extreme)) extreme = row[c];
      }
      const int zero = q.zero();
      const float max_code = q.bits == 8 ? 127.0f : 7.0f;
      scale_out = f16_rounded(q.bits == 8 ? std::fabs(extreme) / 127.0f : -extreme / 8.0f, &scale);
      for (int64_t c = c0; c < c1; ++c) {
        const float code = scale != 0.0f ? std::nearbyint(row[c] / scale) : 0.0f;
        codes[c] = static_cast<uint8_t>(std::clamp(code, -static_cast<float>(zero), max_code) + zero);
      }
    }
  }
  return q;
}

}  // namespace actord
