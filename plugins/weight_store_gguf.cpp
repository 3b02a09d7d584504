// WeightStore's GGUF source: a GGUF file's tensors by HF name (plugins/gguf_model.hpp, memory/gguf_tensors.hpp).
#include <algorithm>

#include "memory/gguf_tensors.hpp"
#include "plugins/gguf_model.hpp"
#include "plugins/weight_store.hpp"
#include "plugins/weight_store_internal.hpp"

namespace actord {

using store_detail::named;
using store_detail::resolve;

Result<WeightStore::GgufMatrix> WeightStore::gguf_matrix(const std::string& name, int64_t rows, int64_t cols,
                                                         MatrixSlice slice, const GgufTensor** from_gguf) {
  const auto gguf_name = gguf_tensor_name(*gguf_, name);
  const GgufTensor* t = gguf_name ? gguf_->tensor(*gguf_name) : nullptr;
  if (!t) return make_error(Errc::not_found, "tensor " + name + " not found in " + gguf_->path().string());
  // 2-D, 3-D stacked experts read as their [experts x rows, cols], or a vector as one row (Qwen2-MoE's shared
  // expert gate).
  if (t->dims.empty() || t->dims.size() > 3 || t->rows() != rows || t->cols() != cols) {
    return make_error(Errc::invalid_argument, name + " (GGUF " + t->name + "): expected [" + std::to_string(rows) +
                                                  ", " + std::to_string(cols) + "], found [" +
                                                  std::to_string(t->rows()) + ", " + std::to_string(t->cols()) + "]");
  }
  auto s = resolve(name, rows, cols, slice);
  if (!s) return s.error();
  const std::vector<int64_t> order = qk_row_order(*gguf_, name, rows);
  auto source_row = [&](int64_t r) { return order.empty() ? r : order[static_cast<size_t>(r)]; };
  GgufMatrix out;
  if (const auto dtype = gguf_float_dtype(t->type)) {
    const DType served = convert_to_ ? *convert_to_ : *dtype;
    exec::HostMatrix m;
    m.rows = s->row_count;
    m.cols = s->col_count;
    if (order.empty() && served == *dtype && s->col_count == cols) {
      m.dtype = *dtype;
      m.data = t->data + static_cast<size_t>(s->row_first * cols) * dtype_size(*dtype);
      *from_gguf = t;
    } else {
      std::vector<float> row(static_cast<size_t>(cols));
      std::vector<unsigned char> bytes(static_cast<size_t>(m.rows * m.cols) * dtype_size(served));
      for (int64_t r = 0; r < m.rows; ++r) {
        convert_to_f32(*dtype, t->data + static_cast<size_t>(source_row(s->row_first + r) * cols) * dtype_size(*dtype),
                       row.data(), row.size());
        convert_from_f32(served, row.data() + s->col_first, bytes.data() + static_cast<size_t>(r * m.cols) * dtype_size(served),
                         static_cast<size_t>(m.cols));
      }
      m.dtype = served;
      m.data = own(std::move(bytes));
    }
    out.host = m;
    return out;
  }
  // Rows kept in place (no reorder) are cut before decoding: a row is whole blocks, so one expert of a stack or a
  // rank's shard decodes only its own rows.
  GgufTensor rows_only = *t;
  MatrixSlice rest = *s;
  if (order.empty() && s->row_count != rows) {
    const size_t row_bytes = t->bytes / static_cast<size_t>(rows);
    rows_only.data = t->data + static_cast<size_t>(s->row_first) * row_bytes;
    rows_only.bytes = static_cast<size_t>(s->row_count) * row_bytes;
    rows_only.dims = {cols, s->row_count};
    rest.row_first = 0;
  }
  auto q = gguf_quantized(rows_only);
  if (!q) return named(name, q.error());
  if (!order.empty()) q = q->with_row_order(order);  // HF's row order: whole rows of codes and of scales move
  if (rest.row_count != q->rows || rest.col_count != cols) {
    auto part = q->slice(rest.row_first, rest.row_count, rest.col_first, rest.col_count);
    if (!part) return named(name, part.error());
    q = std::move(part);
  }
  out.quantized = std::move(*q);
  return out;
}

Result<exec::Weight> WeightStore::gguf_weight(exec::Backend& backend, const std::string& name, int64_t rows,
                                              int64_t cols, exec::WeightUse use, MatrixSlice slice) {
  const GgufTensor* view = nullptr;
  auto m = gguf_matrix(name, rows, cols, slice, &view);
  if (!m) return m.error();
  auto release = [&] {
    if (view) gguf_->release(*view);
    else if (m->host) owned_.pop_back();
  };
  Result<exec::Weight> w = make_error(Errc::internal, "unreachable");
  if (m->quantized) {
    w = backend.upload_quantized(*m->quantized);
    if (const auto gguf_name = gguf_tensor_name(*gguf_, name)) gguf_->release(*gguf_->tensor(*gguf_name));
  } else if (use == exec::WeightUse::gemm && quant_.enabled()) {
    const exec::HostMatrix& h = *m->host;
    const QuantizedMatrix q = quantize(h.dtype, h.data, h.rows, h.cols, h.row_stride, quant_);
    release();
    w = backend.upload_quantized(q);
  } else {
    w = backend.upload_matrix(*m->host, use);
    if (!backend.keeps_host_view(use)) release();
  }
  if (!w) return named(name, w.error());
  return w;
}

Result<exec::Weight> WeightStore::gguf_glu_weight(exec::Backend& backend, const Located& gate_at, const Located& up_at,
                                                  int64_t cols) {
  const std::string &gate_name = gate_at.name, &up_name = up_at.name;
  const GgufTensor *gate_view = nullptr, *up_view = nullptr;
  auto gate = gguf_matrix(gate_name, gate_at.rows, cols, gate_at.slice, &gate_view);
  if (!gate) return gate.error();
  auto up = gguf_matrix(up_name, up_at.rows, cols, up_at.slice, &up_view);
  if (!up) return up.error();
  // Both quantized alike: fused as they are. Otherwise both as f32 (dequantized), quantized when asked.
  auto as_quantized = [&](GgufMatrix& m) -> QuantizedMatrix {
    if (m.quantized) return std::move(*m.quantized);
    return quantize(m.host->dtype, m.host->data, m.host->rows, m.host->cols, m.host->row_stride, quant_);
  };
  auto as_f32 = [](const GgufMatrix& m) {
    if (m.quantized) return m.quantized->dequantized();
    const exec::HostMatrix& h = *m.host;
    std::vector<float> v(static_cast<size_t>(h.rows * h.cols));
    const int64_t stride = h.row_stride ? h.row_stride : h.cols;
    for (int64_t r = 0; r < h.rows; ++r) {
      convert_to_f32(h.dtype, static_cast<const unsigned char*>(h.data) + r * stride * static_cast<int64_t>(dtype_size(h.dtype)),
                     v.data() + r * h.cols, static_cast<size_t>(h.cols));
    }
    return v;
  };
  const bool same_quantized = gate->quantized && up->quantized && gate->quantized->bits == up->quantized->bits &&
                              gate->quantized->group == up->quantized->group &&
                              gate->quantized->affine() == up->quantized->affine();
  const bool both_float = gate->host && up->host;
  Result<exec::Weight> fused = make_error(Errc::internal, "unreachable");
  if (same_quantized || (both_float && quant_.enabled())) {
    const QuantizedMatrix g = as_quantized(*gate), u = as_quantized(*up);
    fused = backend.upload_quantized_glu(g, u);
  } else if (both_float) {
    fused = backend.upload_glu(*gate->host, *up->host);
  } else {
    const std::vector<float> g = as_f32(*gate), u = as_f32(*up);
    const int64_t n_rows = static_cast<int64_t>(g.size()) / cols;
    if (quant_.enabled()) {
      fused = backend.upload_quantized_glu(quantize(DType::f32, g.data(), n_rows, cols, 0, quant_),
                                           quantize(DType::f32, u.data(), n_rows, cols, 0, quant_));
    } else {
      fused = backend.upload_glu(exec::HostMatrix{DType::f32, g.data(), n_rows, cols, 0},
                                 exec::HostMatrix{DType::f32, u.data(), n_rows, cols, 0});
    }
  }
  // Release in reverse order of ownership (owned copies are a stack).
  for (auto [m, view, name] : {std::tuple{&*up, up_view, &up_name}, std::tuple{&*gate, gate_view, &gate_name}}) {
    if (view) {
      gguf_->release(*view);
    } else if (m->host) {
      owned_.pop_back();
    } else if (const GgufTensor* t = gguf_->tensor(gguf_tensor_name(*gguf_, *name).value_or(""))) {
      gguf_->release(*t);
    }
  }
  if (!fused) return named(gate_name, fused.error());
  return fused;
}

}  // namespace actord
