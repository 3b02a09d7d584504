// WeightStore's AWQ / GPTQ source: a checkpoint's quantized layers (memory/checkpoint_quantized.hpp).
#include "memory/checkpoint_quantized.hpp"
#include "plugins/weight_store.hpp"
#include "plugins/weight_store_internal.hpp"

namespace actord {

using store_detail::checkpoint_prefix;
using store_detail::named;
using store_detail::resolve;

Result<std::optional<QuantizedMatrix>> WeightStore::checkpoint_matrix(const std::string& name, int64_t rows,
                                                                     int64_t cols, MatrixSlice slice) {
  const std::string prefix = checkpoint_prefix(name);
  if (!file_ || !checkpoint_.enabled() || prefix.empty() || !file_->contains(prefix + "qweight")) {
    return std::optional<QuantizedMatrix>{};
  }
  auto s = resolve(name, rows, cols, slice);
  if (!s) return s.error();
  const CheckpointTensors t{file_->find(prefix + "qweight"), file_->find(prefix + "qzeros"),
                            file_->find(prefix + "scales"), file_->find(prefix + "g_idx")};
  const std::string base = prefix.substr(0, prefix.size() - 1);
  Result<QuantizedMatrix> q = make_error(Errc::internal, "unreachable");
  if (checkpoint_.method == "awq") {
    q = awq_matrix(base, t, rows, cols, checkpoint_.group_size);
  } else {
    q = gptq_matrix(base, t, rows, cols, checkpoint_.group_size, checkpoint_.bits, checkpoint_.zeros_plus_one);
    if (!q && q.error().code == Errc::unsupported && q.error().message.find("act-order") != std::string::npos) {
      // Act-order groups are not contiguous: the exact values, quantized again to int8 in contiguous groups of 32
      // (4 bits on other groups than the checkpoint's would lose much more).
      auto values = gptq_values(base, t, rows, cols, checkpoint_.group_size, checkpoint_.bits, checkpoint_.zeros_plus_one);
      if (!values) return values.error();
      const QuantSpec spec{QuantKind::int8, 32, false};
      q = quantize(DType::f32, values->data(), rows, cols, 0, spec);
    }
  }
  if (!q) return q.error();
  for (const TensorView* v : {t.qweight, t.qzeros, t.scales, t.g_idx}) {
    if (v) release_pages(*v);
  }
  if (s->row_count != rows || s->col_count != cols) {
    auto part = q->slice(s->row_first, s->row_count, s->col_first, s->col_count);
    if (!part) return named(name, part.error());
    return std::optional<QuantizedMatrix>{std::move(*part)};
  }
  return std::optional<QuantizedMatrix>{std::move(*q)};
}

}  // namespace actord
