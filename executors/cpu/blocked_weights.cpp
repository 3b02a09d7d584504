#include "executors/cpu/blocked_weights.hpp"

#include <algorithm>
#include <cstring>

#include "core/status.hpp"
#include "executors/cpu/cpu_features.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu {
namespace {

// Position of column c (0..31) among the 32 values stored for one input feature.
inline int slot(DType dtype, int c) {
  if (dtype != DType::bf16) return c;
  return c < 16 ? 2 * c + 1 : 2 * (c - 16);
}

inline const unsigned char* block_base(const WeightMatrix& w, int64_t block) {
  return static_cast<const unsigned char*>(w.data) +
         block * w.cols * kBlockCols * static_cast<int64_t>(dtype_size(w.dtype));
}

}  // namespace

int64_t x_chunk_bytes() {
  static const int64_t bytes = [] {
    for (const CacheLevel& c : CpuFeatures::detect().caches) {
      if (c.level == 2 && c.type != "Instruction" && c.bytes >= (64u << 10)) return static_cast<int64_t>(c.bytes / 2);
    }
    return int64_t{512} << 10;
  }();
  return bytes;
}

size_t blocked_bytes(DType dtype, int64_t rows, int64_t cols) {
  const int64_t blocks = (rows + kBlockCols - 1) / kBlockCols;
  return static_cast<size_t>(blocks * kBlockCols * cols) * dtype_size(dtype);
}

namespace {

// Blocked matrix of `rows` x `cols`, row r's values from row_of(r) (nullptr: zeros).
template <class RowOf>
WeightMatrix pack_rows(DType dtype, int64_t rows, int64_t cols, RowOf row_of, void* dst) {
  const size_t esize = dtype_size(dtype);
  const int64_t blocks = (rows + kBlockCols - 1) / kBlockCols;
  auto* out = static_cast<unsigned char*>(dst);
  std::memset(out, 0, blocked_bytes(dtype, rows, cols));
  for (int64_t b = 0; b < blocks; ++b) {
    unsigned char* block = out + b * cols * kBlockCols * static_cast<int64_t>(esize);
    const int cols_here = static_cast<int>(std::min<int64_t>(kBlockCols, rows - b * kBlockCols));
    for (int c = 0; c < cols_here; ++c) {
      const unsigned char* row = row_of(b * kBlockCols + c);
      if (!row) continue;
      const size_t offset = static_cast<size_t>(slot(dtype, c)) * esize;
      for (int64_t t = 0; t < cols; ++t) {
        std::memcpy(block + static_cast<size_t>(t) * kBlockCols * esize + offset, row + t * esize, esize);
      }
    }
  }
  WeightMatrix view{dtype, dst, rows, cols, 0};
  view.layout = WeightLayout::blocked;
  return view;
}

int64_t glu_rows(int64_t ff) { return (ff + 15) / 16 * kBlockCols; }

}  // namespace

WeightMatrix pack_blocked(const WeightMatrix& src, void* dst) {
  ACTORD_CHECK(src.layout == WeightLayout::row_major);
  return pack_rows(src.dtype, src.rows, src.cols, [&](int64_t r) { return src.row(r); }, dst);
}

size_t glu_bytes(DType dtype, int64_t ff, int64_t cols) { return blocked_bytes(dtype, glu_rows(ff), cols); }

WeightMatrix pack_glu(const WeightMatrix& gate, const WeightMatrix& up, void* dst) {
  ACTORD_CHECK(gate.layout == WeightLayout::row_major && up.layout == WeightLayout::row_major);
  ACTORD_CHECK(gate.dtype == up.dtype && gate.rows == up.rows && gate.cols == up.cols);
  const int64_t ff = gate.rows;
  auto row_of = [&](int64_t r) -> const unsigned char* {
    const int64_t feature = r / kBlockCols * 16 + r % 16;
    if (feature >= ff) return nullptr;
    return r % kBlockCols < 16 ? gate.row(feature) : up.row(feature);
  };
  return pack_rows(gate.dtype, glu_rows(ff), gate.cols, row_of, dst);
}

void weight_row_to_f32(const WeightMatrix& w, int64_t row, float* out) {
  if (w.layout == WeightLayout::quantized) return quantized_row_to_f32(w, row, out);
  if (w.layout == WeightLayout::row_major) {
    convert_to_f32(w.dtype, w.row(row), out, static_cast<size_t>(w.cols));
    return;
  }
  const size_t esize = dtype_size(w.dtype);
  const unsigned char* base =
      block_base(w, row / kBlockCols) + static_cast<size_t>(slot(w.dtype, static_cast<int>(row % kBlockCols))) * esize;
  for (int64_t t = 0; t < w.cols; ++t) convert_to_f32(w.dtype, base + t * kBlockCols * esize, out + t, 1);
}

namespace {

// acc[c] = x_row . W[block column c], c < 32, for one blocked weight block (the portable kernels' core).
void block_dot(const WeightMatrix& w, const unsigned char* block, const float* x_row, float* acc) {
  const size_t esize = dtype_size(w.dtype);
  float wf[kBlockCols];
  std::fill_n(acc, kBlockCols, 0.0f);
  for (int64_t t = 0; t < w.cols; ++t) {
    convert_to_f32(w.dtype, block + static_cast<size_t>(t) * kBlockCols * esize, wf, kBlockCols);
    for (int c = 0; c < kBlockCols; ++c) acc[c] += x_row[t] * wf[slot(w.dtype, c)];
  }
}

}  // namespace

void gemm_nt_blocked_portable(const float* x, int m, const WeightMatrix& w, const float* bias, float* y,
                              int64_t n_begin, int64_t n_end) {
  float acc[kBlockCols];
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const int cols = static_cast<int>(std::min<int64_t>(kBlockCols, n_end - j0));
    for (int i = 0; i < m; ++i) {
      block_dot(w, block_base(w, j0 / kBlockCols), x + static_cast<int64_t>(i) * w.cols, acc);
      float* yi = y + static_cast<int64_t>(i) * w.rows + j0;
      for (int c = 0; c < cols; ++c) yi[c] = acc[c] + (bias ? bias[j0 + c] : 0.0f);
    }
  }
}

void gemm_nt_glu_portable(const float* x, int m, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                          int64_t n_end) {
  float acc[kBlockCols];
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const int64_t out0 = j0 / 2;
    const int outs = static_cast<int>(std::min<int64_t>(16, ff - out0));
    for (int i = 0; i < m; ++i) {
      block_dot(w, block_base(w, j0 / kBlockCols), x + static_cast<int64_t>(i) * w.cols, acc);
      float* yi = y + static_cast<int64_t>(i) * ff + out0;
      for (int c = 0; c < outs; ++c) yi[c] = silu(acc[c]) * acc[16 + c];
    }
  }
}

}  // namespace actord::cpu
