// LoRA adapters in the transformer (plugins/lora_adapter.hpp): each layer holds every adapter's deltas, sliced as
// the projections they change are (A in the dtype of the model's own weights, B in f32 times the adapter's scaling),
// and a step adds scaling * (x A^T) B^T to the rows of the sequences that name the adapter.
//
// Tensor parallelism: a column-split projection (q, k, v, gate, up: this rank's output rows) takes A whole and its
// rows of B; a row-split one (o, down: this rank's input columns, partial sums all-reduced) takes its columns of A
// and B whole, so each rank's delta is a partial sum of the whole delta that the same all-reduce completes:
// sum over ranks of (x_r A_r^T) B^T = (x A^T) B^T.
#include <algorithm>
#include <iterator>
#include <vector>

#include "core/dtype.hpp"

#include "plugins/transformer/transformer_model.hpp"

namespace actord {

Status TransformerModel::load_lora(const ModelLoadOptions& options) {
  num_lora_ = static_cast<int>(options.lora.size());
  if (num_lora_ == 0) return {};
  exec::Backend& be = *backend_;
  if (!be.computes_in_host_memory())
    return make_error(Errc::unsupported, "lora.modules: LoRA adapters on " + be.describe() +
                                             ": they run on CPU ranks only so far");
  const bool mlp_on_ffn_ranks = place_.afd();
  for (const auto& adapter : options.lora) {
    if (mlp_on_ffn_ranks && (adapter->changes(LoraTarget::gate) || adapter->changes(LoraTarget::up) ||
                             adapter->changes(LoraTarget::down)))
      return make_error(Errc::unsupported, "lora.modules." + adapter->name() +
                                               ": the adapter changes the MLP, which attention-FFN disaggregation "
                                               "serves from its FFN pool: adapters there change attention only");
  }
  if (place_.ffn()) return {};  // an FFN rank: adapters change nothing it holds
  const DType served = store_->served_dtype();
  const DType dtype = served == DType::bf16 || served == DType::f16 ? served : DType::f32;
  // rows x cols of `m` (row-major, `stride` apart) from `first`, times `factor`, uploaded in `as`. A goes in the dtype
  // the model's weights are served in, so that its products take the base's kernels (bf16 dot products, AMX tiles);
  // B, whose products have only r inputs, in f32, which runs them faster than bf16 tiles (bench/gemm_bench.cpp's
  // lora rows, on the AMX Xeon at 512 rows: 127 against 162 us), with the adapter's scaling folded in (f32 keeps it
  // to a rounding of each element, and a step scales nothing).
  auto upload = [&](const std::vector<float>& m, int64_t stride, int64_t first, int64_t rows, int64_t cols, DType as,
                    float factor) {
    std::vector<float> piece(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) piece[size_t(r * cols + c)] = m[size_t(first + r * stride + c)] * factor;
    std::vector<unsigned char> converted(piece.size() * dtype_size(as));
    convert_from_f32(as, piece.data(), converted.data(), piece.size());
    return be.upload_matrix(exec::HostMatrix{as, converted.data(), rows, cols, cols}, exec::WeightUse::gemm);
  };
  const int head_dim = cfg_.head_dim;
  const Range heads{shard_.heads.first * head_dim, shard_.heads.count * head_dim};
  const Range kv{shard_.kv_heads.first * head_dim, shard_.kv_heads.count * head_dim};
  for (int local = 0; local < shard_.layers.count; ++local) {
    Layer& L = layers_[static_cast<size_t>(local)];
    L.lora.resize(options.lora.size());
    for (size_t k = 0; k < options.lora.size(); ++k) {
      const LoraAdapter& adapter = *options.lora[k];
      for (int t = 0; t < kLoraTargets; ++t) {
        const auto target = static_cast<LoraTarget>(t);
        const LoraPair* pair = adapter.pair(shard_.layers.first + local, target);
        if (!pair) continue;
        // Which part of the projection this rank holds: columns of A (row split) or rows of B (column split).
        const bool row_split = target == LoraTarget::o || target == LoraTarget::down;
        const Range part = target == LoraTarget::q || target == LoraTarget::o   ? heads
                           : target == LoraTarget::k || target == LoraTarget::v ? kv
                                                                                 : shard_.intermediate;
        auto a = row_split ? upload(pair->a, pair->in, part.first, pair->rank, part.count, dtype, 1.0f)
                           : upload(pair->a, pair->in, 0, pair->rank, pair->in, dtype, 1.0f);
        if (!a) return Error{a.error().code, "lora.modules." + adapter.name() + ": " + a.error().message};
        const float scaling = adapter.scaling();
        auto b = row_split ? upload(pair->b, pair->rank, 0, pair->out, pair->rank, DType::f32, scaling)
                           : upload(pair->b, pair->rank, int64_t(part.first) * pair->rank, part.count, pair->rank,
                                    DType::f32, scaling);
        if (!b) return Error{b.error().code, "lora.modules." + adapter.name() + ": " + b.error().message};
        L.lora[k][size_t(t)] = {std::move(*a), std::move(*b)};
      }
    }
  }
  return {};
}

void TransformerModel::group_lora_rows(const ForwardBatch& batch) {
  lora_groups_.clear();
  if (num_lora_ == 0) return;
  for (const SeqSlice& s : batch.seqs) {
    if (s.lora == 0) continue;
    ACTORD_CHECK(s.lora > 0 && s.lora <= num_lora_);
    const int adapter = s.lora - 1;
    auto group = std::ranges::find(lora_groups_, adapter, &LoraGroup::adapter);
    if (group == lora_groups_.end()) {
      lora_groups_.push_back(LoraGroup{adapter, false, {}, {}});
      group = lora_groups_.end() - 1;
    }
    for (int32_t r = 0; r < s.num_tokens; ++r) group->rows.push_back(s.first_token + r);
  }
  for (LoraGroup& g : lora_groups_) {
    g.all = g.rows.size() == batch.tokens.size();
    g.ones.assign(g.rows.size(), 1.0f);
  }
}

void TransformerModel::add_lora(const Layer& L, std::initializer_list<LoraOutput> outputs, const exec::Buffer& x,
                                int n) {
  exec::Backend& be = *backend_;
  ACTORD_CHECK(outputs.size() <= std::size(lora_t_));
  for (const LoraGroup& g : lora_groups_) {
    const auto& deltas = L.lora[static_cast<size_t>(g.adapter)];
    const int rows = g.all ? n : static_cast<int>(g.rows.size());
    // The A products of every output this adapter changes, in one pass over x (its group's rows).
    exec::GemmTarget shrink[std::size(lora_t_)];
    const LoraOutput* changed[std::size(lora_t_)];
    size_t count = 0;
    for (const LoraOutput& o : outputs) {
      const Layer::LoraDelta& d = deltas[static_cast<size_t>(o.target)];
      if (!d.a) continue;
      be.reserve(lora_t_[count], size_t(rows) * size_t(d.a.rows));
      shrink[count] = {&d.a, nullptr, &lora_t_[count]};
      changed[count++] = &o;
    }
    if (count == 0) continue;
    const exec::Buffer* input = &x;
    if (!g.all) {
      const int in = static_cast<int>(shrink[0].w->cols);
      be.reserve(lora_x_, size_t(rows) * in);
      be.gather_rows(x, g.rows, in, lora_x_);
      input = &lora_x_;
    }
    be.gemm_multi(*input, std::span<const exec::GemmTarget>(shrink, count), rows);
    for (size_t i = 0; i < count; ++i) {
      const Layer::LoraDelta& d = deltas[static_cast<size_t>(changed[i]->target)];
      const int out = static_cast<int>(d.b.rows);
      be.reserve(lora_y_, size_t(rows) * out);
      be.gemm(lora_t_[i], d.b, nullptr, lora_y_, rows);
      if (g.all) {
        be.add(*changed[i]->y, lora_y_, size_t(rows) * out);
      } else {
        be.scatter_add_rows(lora_y_, g.rows, g.ones, out, *changed[i]->y);
      }
    }
  }
}

}  // namespace actord
