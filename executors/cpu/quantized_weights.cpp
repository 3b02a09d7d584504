#include "executors/cpu/quantized_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/status.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu {

namespace {

constexpr int kChunkBytes = 128;

WeightMatrix describe(const QuantizedMatrix& q, int64_t rows) {
  WeightMatrix w;
  w.dtype = DType::f16;
  w.rows = rows;
  w.cols = q.cols;
  w.layout = WeightLayout::quantized;
  w.quant = WeightQuant{q.bits, q.group, q.affine()};
  return w;
}

// The codes of a group come in units: 8 bits, 4 features per 128-byte chunk; 4 bits, 8 per chunk; 6 bits, 16
// features per three chunks (two 4-bit chunks of their low four bits, then one of their high two).
int unit_features(int bits) { return bits == 8 ? 4 : bits == 4 ? 8 : 16; }
int64_t unit_bytes(int bits) { return bits == 6 ? 3 * kChunkBytes : kChunkBytes; }

// A 4-bit code's place in its chunk: feature f (< 8) of column c at byte 4c + f % 4, low nibble for f < 4.
int nibble_byte(int c, int f) { return 4 * c + f % 4; }
int nibble_shift(int f) { return (f / 4) * 4; }

// Column c's code of feature f (< unit_features) of a unit, written into (zeroed) or read from it.
void put_code(unsigned char* unit, int bits, int c, int f, unsigned code) {
  if (bits == 8) {
    unit[4 * c + f] = static_cast<unsigned char>(code);
  } else if (bits == 4) {
    unit[nibble_byte(c, f)] |= static_cast<unsigned char>(code << nibble_shift(f));
  } else {
    unit[f / 8 * kChunkBytes + nibble_byte(c, f % 8)] |= static_cast<unsigned char>((code & 15) << nibble_shift(f % 8));
    unit[2 * kChunkBytes + 4 * c + f % 4] |= static_cast<unsigned char>((code >> 4) << (2 * (f / 4)));
  }
}
unsigned get_code(const unsigned char* unit, int bits, int c, int f) {
  if (bits == 8) return unit[4 * c + f];
  if (bits == 4) return (unit[nibble_byte(c, f)] >> nibble_shift(f)) & 15u;
  const unsigned low = (unit[f / 8 * kChunkBytes + nibble_byte(c, f % 8)] >> nibble_shift(f % 8)) & 15u;
  const unsigned high = (unit[2 * kChunkBytes + 4 * c + f % 4] >> (2 * (f / 4))) & 3u;
  return low | high << 4;
}

// A quantized block-layout matrix of `rows` output features, row r from source(r) = (matrix, its row) or null.
template <class RowOf>
WeightMatrix pack_rows(const QuantizedMatrix& like, int64_t rows, RowOf row_of, void* dst) {
  WeightMatrix w = describe(like, rows);
  w.data = dst;
  const int64_t groups = quant_groups(w), group_bytes = quant_group_bytes(w);
  const int features = unit_features(like.bits);
  const int64_t blocks = (rows + kBlockCols - 1) / kBlockCols;
  auto* out = static_cast<unsigned char*>(dst);
  std::memset(out, 0, static_cast<size_t>(blocks * quant_block_bytes(w)));
  for (int64_t b = 0; b < blocks; ++b) {
    for (int c = 0; c < kBlockCols; ++c) {
      const auto [m, r] = row_of(b * kBlockCols + c);
      if (!m) continue;
      for (int64_t g = 0; g < groups; ++g) {
        unsigned char* group = out + (b * groups + g) * group_bytes;
        const int64_t c0 = g * like.group, c1 = std::min(like.cols, c0 + like.group);
        for (int64_t t = c0; t < c1; ++t) {
          const int64_t f = t - c0;
          put_code(group + f / features * unit_bytes(like.bits), like.bits, c, static_cast<int>(f % features),
                   m->codes[r * like.cols + t]);
        }
        unsigned char* scales = group + quant_codes_bytes(w);
        std::memcpy(scales + 2 * c, &m->scales[r * groups + g], 2);
        if (like.affine()) std::memcpy(scales + 64 + 2 * c, &m->offsets[r * groups + g], 2);
      }
    }
  }
  return w;
}

using Source = std::pair<const QuantizedMatrix*, int64_t>;

}  // namespace

int64_t quant_codes_bytes(const WeightMatrix& w) {
  return quant_group_stride(w) / unit_features(w.quant.bits) * unit_bytes(w.quant.bits);
}

int64_t quant_group_bytes(const WeightMatrix& w) {
  return quant_codes_bytes(w) + (w.quant.affine ? 128 : 64);
}

size_t quantized_bytes(const QuantizedMatrix& q) {
  const WeightMatrix w = describe(q, q.rows);
  return static_cast<size_t>((q.rows + kBlockCols - 1) / kBlockCols * quant_block_bytes(w));
}

WeightMatrix pack_quantized(const QuantizedMatrix& q, void* dst) {
  return pack_rows(q, q.rows, [&](int64_t r) { return r < q.rows ? Source{&q, r} : Source{nullptr, 0}; }, dst);
}

size_t quantized_glu_bytes(const QuantizedMatrix& gate) {
  const int64_t rows = (gate.rows + 15) / 16 * kBlockCols;
  const WeightMatrix w = describe(gate, rows);
  return static_cast<size_t>(rows / kBlockCols * quant_block_bytes(w));
}

WeightMatrix pack_quantized_glu(const QuantizedMatrix& gate, const QuantizedMatrix& up, void* dst) {
  ACTORD_CHECK(gate.rows == up.rows && gate.cols == up.cols && gate.bits == up.bits && gate.group == up.group &&
               gate.affine() == up.affine());
  const int64_t ff = gate.rows, rows = (ff + 15) / 16 * kBlockCols;
  return pack_rows(gate, rows, [&](int64_t r) {
    const int64_t feature = r / kBlockCols * 16 + r % 16;
    if (feature >= ff) return Source{nullptr, 0};
    return Source{r % kBlockCols < 16 ? &gate : &up, feature};
  }, dst);
}

namespace {

// The dequantized values of block column c over features [0, cols) (a weight row, or one column of a fused block).
void dequantize_column(const WeightMatrix& w, const unsigned char* block, int c, float* out) {
  const int64_t groups = quant_groups(w), group_bytes = quant_group_bytes(w);
  const int bits = w.quant.bits, features = unit_features(bits);
  const int zero = symmetric_zero(bits);
  for (int64_t g = 0; g < groups; ++g) {
    const unsigned char* group = block + g * group_bytes;
    const unsigned char* scales = group + quant_codes_bytes(w);
    uint16_t s16 = 0, o16 = 0;
    std::memcpy(&s16, scales + 2 * c, 2);
    const float scale = f16_to_f32(s16);
    float offset = -zero * scale;
    if (w.quant.affine) {
      std::memcpy(&o16, scales + 64 + 2 * c, 2);
      offset = f16_to_f32(o16);
    }
    const int64_t c0 = g * w.quant.group, c1 = std::min(w.cols, c0 + w.quant.group);
    for (int64_t t = c0; t < c1; ++t) {
      const int64_t f = t - c0;
      const unsigned code = get_code(group + f / features * unit_bytes(bits), bits, c, static_cast<int>(f % features));
      out[t] = scale * static_cast<float>(code) + offset;
    }
  }
}

}  // namespace

void quantized_row_to_f32(const WeightMatrix& w, int64_t row, float* out) {
  ACTORD_CHECK(w.layout == WeightLayout::quantized && row >= 0 && row < w.rows);
  const auto* block = static_cast<const unsigned char*>(w.data) + row / kBlockCols * quant_block_bytes(w);
  dequantize_column(w, block, static_cast<int>(row % kBlockCols), out);
}

namespace {

// This thread's scratch for prepared x, one per slot (gemm_nt_multi uses its output's index, up to 8).
struct XStorage {
  std::vector<float> x, sums, row_scales;
  std::vector<int8_t> codes;
  std::vector<int32_t> code_sums;
};
XStorage& storage(int slot) {
  thread_local XStorage slots[8];
  ACTORD_CHECK(slot >= 0 && slot < 8);
  return slots[slot];
}

QuantizedX shape_of(int m, const WeightMatrix& w) {
  QuantizedX q;
  q.m = m;
  q.ld = quant_cols_padded(w);
  q.groups = quant_groups(w);
  q.group_stride = quant_group_stride(w);
  return q;
}

// Row i's values laid out by group in `out` (ld apart): group g's at [g * stride, +stride), zeros after.
template <class T>
void lay_out_by_group(const T* x, int m, int64_t k, int64_t group, const QuantizedX& q, T* out) {
  for (int i = 0; i < m; ++i) {
    T* row = out + i * q.ld;
    std::fill(row, row + q.ld, T{0});
    for (int64_t g = 0; g < q.groups; ++g) {
      const int64_t c0 = g * group, n = std::min(k, c0 + group) - c0;
      std::copy_n(x + i * k + c0, n, row + g * q.group_stride);
    }
  }
}

}  // namespace

QuantizedX quantized_x_f32(const float* x, int m, const WeightMatrix& w, int slot) {
  QuantizedX q = shape_of(m, w);
  XStorage& s = storage(slot);
  const int64_t k = w.cols, group = w.quant.group;
  if (q.ld == k) {
    q.x = x;
  } else {
    s.x.resize(static_cast<size_t>(m * q.ld));
    lay_out_by_group(x, m, k, group, q, s.x.data());
    q.x = s.x.data();
  }
  s.sums.resize(static_cast<size_t>(m * q.groups));
  for (int i = 0; i < m; ++i) {
    const float* row = x + i * k;
    for (int64_t g = 0; g < q.groups; ++g) {
      const int64_t c0 = g * group, c1 = std::min(k, c0 + group);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t t = c0; t < c1; ++t) sum += row[t];
      s.sums[static_cast<size_t>(i * q.groups + g)] = sum;
    }
  }
  q.sums = s.sums.data();
  return q;
}

void quantize_rows_int8(const float* x, int m, int64_t k, int64_t ld, int8_t* codes, float* scales) {
  if (detected_isa() == Isa::avx512) return quantize_rows_int8_avx512(x, m, k, ld, codes, scales);
  if (detected_isa() == Isa::avx2) return quantize_rows_int8_avx2(x, m, k, ld, codes, scales);
  for (int i = 0; i < m; ++i) {
    const float* row = x + i * k;
    float amax = 0.0f;
    for (int64_t t = 0; t < k; ++t) amax = std::max(amax, std::fabs(row[t]));
    const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    scales[i] = scale;
    int8_t* out = codes + i * ld;
    for (int64_t t = 0; t < k; ++t) out[t] = static_cast<int8_t>(std::nearbyint(row[t] * inv));
    std::fill(out + k, out + ld, int8_t{0});
  }
}

QuantizedX quantized_x_int8(const float* x, int m, const WeightMatrix& w, int slot) {
  QuantizedX q = shape_of(m, w);
  XStorage& s = storage(slot);
  const int64_t k = w.cols, group = w.quant.group;
  s.codes.resize(static_cast<size_t>(m * q.ld));
  s.row_scales.resize(static_cast<size_t>(m));
  if (q.ld == k) {
    quantize_rows_int8(x, m, k, k, s.codes.data(), s.row_scales.data());
  } else {
    thread_local std::vector<int8_t> dense;
    dense.resize(static_cast<size_t>(m * k));
    quantize_rows_int8(x, m, k, k, dense.data(), s.row_scales.data());
    lay_out_by_group(dense.data(), m, k, group, q, s.codes.data());
  }
  s.code_sums.resize(static_cast<size_t>(m * q.groups));
  for (int i = 0; i < m; ++i) {
    const int8_t* row = s.codes.data() + i * q.ld;
    for (int64_t g = 0; g < q.groups; ++g) {
      int32_t sum = 0;
      for (int64_t t = g * q.group_stride; t < (g + 1) * q.group_stride; ++t) sum += row[t];
      s.code_sums[static_cast<size_t>(i * q.groups + g)] = sum;
    }
  }
  q.codes = s.codes.data();
  q.row_scales = s.row_scales.data();
  q.code_sums = s.code_sums.data();
  return q;
}

void gemm_nt_quantized_portable(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  const int64_t block_bytes = quant_block_bytes(w);
  std::vector<float> column(static_cast<size_t>(w.cols));
  const int64_t k = w.cols;
  std::vector<float> acc(static_cast<size_t>(x.m) * kBlockCols);
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const auto* block = static_cast<const unsigned char*>(w.data) + j0 / kBlockCols * block_bytes;
    for (int c = 0; c < kBlockCols; ++c) {
      dequantize_column(w, block, c, column.data());
      for (int i = 0; i < x.m; ++i) {
        // x as prepared: group g's values at g * group_stride.
        const float* xi = x.x + i * x.ld;
        float sum = 0.0f;
        for (int64_t t = 0; t < k; ++t) sum += xi[t / w.quant.group * x.group_stride + t % w.quant.group] * column[t];
        acc[static_cast<size_t>(i) * kBlockCols + c] = sum;
      }
    }
    for (int i = 0; i < x.m; ++i) {
      const float* a = acc.data() + static_cast<size_t>(i) * kBlockCols;
      if (ff_glu > 0) {
        const int64_t out0 = j0 / 2;
        const int outs = static_cast<int>(std::min<int64_t>(16, ff_glu - out0));
        for (int c = 0; c < outs; ++c) y[i * ff_glu + out0 + c] = silu(a[c]) * a[16 + c];
      } else {
        const int cols = static_cast<int>(std::min<int64_t>(kBlockCols, w.rows - j0));
        for (int c = 0; c < cols; ++c) y[i * w.rows + j0 + c] = a[c] + (bias ? bias[j0 + c] : 0.0f);
      }
    }
  }
}

}  // namespace actord::cpu
