// LoRA adapters in the transformer (plugins/lora_adapter.hpp): each layer holds every adapter's deltas, sliced as
// the projections they change are, and a step adds them to the rows of the sequences that name the adapter.
//
// Tensor parallelism: a column-split projection (q, k, v, gate, up: this rank's output rows) takes A whole and its
// rows of B; a row-split one (o, down: this rank's input columns, partial sums all-reduced) takes its columns of A
// and B whole, so each rank's delta is a partial sum of the whole delta that the same all-reduce completes:
// sum over ranks of (x_r A_r^T) B^T = (x A^T) B^T.
#include <algorithm>

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
  const int64_t head_dim = cfg_.head_dim;
  const Range heads{shard_.heads.first * static_cast<int>(head_dim), shard_.heads.count * static_cast<int>(head_dim)};
  const Range kv{shard_.kv_heads.first * static_cast<int>(head_dim), shard_.kv_heads.count * static_cast<int>(head_dim)};
  for (int local = 0; local < shard_.layers.count; ++local) {
    Layer& L = layers_[static_cast<size_t>(local)];
    L.lora.resize(options.lora.size());
    for (size_t k = 0; k < options.lora.size(); ++k) {
      const LoraAdapter& adapter = *options.lora[k];
      for (int t = 0; t < kLoraTargets; ++t) {
        const auto target = static_cast<LoraTarget>(t);
        const LoraPair* pair = adapter.pair(shard_.layers.first + local, target);
        if (!pair) continue;
        // Which part of the projection this rank holds: rows of B (column split) or columns of A (row split).
        const bool row_split = target == LoraTarget::o || target == LoraTarget::down;
        const Range part = target == LoraTarget::q                               ? heads
                           : target == LoraTarget::k || target == LoraTarget::v ? kv
                           : target == LoraTarget::o                             ? heads
                                                                                 : shard_.intermediate;
        exec::HostMatrix a{DType::f32, pair->a.data(), pair->rank, pair->in, pair->in};
        exec::HostMatrix b{DType::f32, pair->b.data(), pair->out, pair->rank, pair->rank};
        if (row_split) {
          a.data = pair->a.data() + part.first;
          a.cols = part.count;
        } else {
          b.data = pair->b.data() + int64_t(part.first) * pair->rank;
          b.rows = part.count;
        }
        auto wa = be.upload_matrix(a, exec::WeightUse::gemm);
        if (!wa) return Error{wa.error().code, "lora.modules." + adapter.name() + ": " + wa.error().message};
        auto wb = be.upload_matrix(b, exec::WeightUse::gemm);
        if (!wb) return Error{wb.error().code, "lora.modules." + adapter.name() + ": " + wb.error().message};
        L.lora[k][size_t(t)] = {std::move(*wa), std::move(*wb)};
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

void TransformerModel::add_lora(const Layer& L, LoraTarget target, const exec::Buffer& x, exec::Buffer& y, int n) {
  exec::Backend& be = *backend_;
  for (const LoraGroup& g : lora_groups_) {
    const Layer::LoraDelta& delta = L.lora[static_cast<size_t>(g.adapter)][static_cast<size_t>(target)];
    if (!delta.a) continue;
    const int rows = g.all ? n : static_cast<int>(g.rows.size());
    const int in = static_cast<int>(delta.a.cols), rank = static_cast<int>(delta.a.rows),
              out = static_cast<int>(delta.b.rows);
    const exec::Buffer* input = &x;
    if (!g.all) {
      be.reserve(lora_x_, size_t(rows) * in);
      be.gather_rows(x, g.rows, in, lora_x_);
      input = &lora_x_;
    }
    be.reserve(lora_t_, size_t(rows) * rank);
    be.gemm(*input, delta.a, nullptr, lora_t_, rows);
    be.reserve(lora_y_, size_t(rows) * out);
    be.gemm(lora_t_, delta.b, nullptr, lora_y_, rows);
    if (g.all) {
      be.add(y, lora_y_, size_t(rows) * out);
    } else {
      be.scatter_add_rows(lora_y_, g.rows, g.ones, out, y);
    }
  }
}

}  // namespace actord
