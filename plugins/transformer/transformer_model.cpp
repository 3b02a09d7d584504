#include "plugins/transformer/transformer_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/kernels.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "memory/kv_cache.hpp"

namespace actord {

TransformerSpec transformer_spec_from_config(const ModelConfig& c) {
  TransformerSpec spec;
  spec.qkv_bias = c.attention_bias;
  spec.num_experts = c.num_experts;
  spec.experts_per_token = c.experts_per_token;
  spec.sliding_window = c.sliding_window;
  return spec;
}

std::vector<WeightSpec> TransformerModel::weight_specs(const ModelConfig& c, const TransformerSpec& spec) {
  const int64_t h = c.hidden_size, q_dim = int64_t(c.num_heads) * c.head_dim,
                kv_dim = int64_t(c.num_kv_heads) * c.head_dim, ff = c.intermediate_size, vocab = c.vocab_size;
  std::vector<WeightSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {vocab, h}, ShardKind::vocab});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {vocab, h}, ShardKind::vocab});
  specs.push_back({"model.norm.weight", {h}, ShardKind::replicated});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    specs.push_back({p + "input_layernorm.weight", {h}, ShardKind::replicated, l});
    specs.push_back({p + "self_attn.q_proj.weight", {q_dim, h}, ShardKind::column, l});
    specs.push_back({p + "self_attn.k_proj.weight", {kv_dim, h}, ShardKind::column, l});
    specs.push_back({p + "self_attn.v_proj.weight", {kv_dim, h}, ShardKind::column, l});
    if (spec.qkv_bias) {
      specs.push_back({p + "self_attn.q_proj.bias", {q_dim}, ShardKind::column, l});
      specs.push_back({p + "self_attn.k_proj.bias", {kv_dim}, ShardKind::column, l});
      specs.push_back({p + "self_attn.v_proj.bias", {kv_dim}, ShardKind::column, l});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {h, q_dim}, ShardKind::row, l});
    specs.push_back({p + "post_attention_layernorm.weight", {h}, ShardKind::replicated, l});
    if (spec.num_experts == 0) {
      specs.push_back({p + "mlp.gate_proj.weight", {ff, h}, ShardKind::column, l});
      specs.push_back({p + "mlp.up_proj.weight", {ff, h}, ShardKind::column, l});
      specs.push_back({p + "mlp.down_proj.weight", {h, ff}, ShardKind::row, l});
    } else {
      specs.push_back({p + "block_sparse_moe.gate.weight", {spec.num_experts, h}, ShardKind::replicated, l});
      for (int e = 0; e < spec.num_experts; ++e) {
        const std::string ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        specs.push_back({ep + "w1.weight", {ff, h}, ShardKind::expert, l, e});
        specs.push_back({ep + "w3.weight", {ff, h}, ShardKind::expert, l, e});
        specs.push_back({ep + "w2.weight", {h, ff}, ShardKind::expert, l, e});
      }
    }
  }
  return specs;
}

Result<std::unique_ptr<Model>> TransformerModel::create(const ModelConfig& cfg, const ModelLoadOptions& options,
                                                        const TransformerSpec& spec) {
  if (!spec.sliding_window.empty() && spec.sliding_window.size() != static_cast<size_t>(cfg.num_layers)) {
    return make_error(Errc::invalid_argument,
                      "TransformerSpec: sliding_window lists " + std::to_string(spec.sliding_window.size()) +
                          " layers, the model has " + std::to_string(cfg.num_layers));
  }
  auto isa = cpu::isa_for(options.isa);
  if (!isa) return isa.error();
  auto store = WeightStore::open(cfg, options);
  if (!store) return store.error();
  std::unique_ptr<TransformerModel> m(new TransformerModel(cfg, spec));
  m->isa_ = *isa;
  m->store_ = *store;
  m->inv_freq_ = cfg.rope_inv_freq();

  // Load exactly the declared weights: matrices blocked for the GEMM (see below), vectors as f32 copies.
  std::map<std::string, cpu::WeightMatrix> matrices;
  std::map<std::string, std::vector<float>> vectors;
  // SiLU-gated MLPs load gate and up fused (one product and no separate activation pass); other activations apply
  // their own function between two plain products.
  const bool fused_glu = spec.activation == Activation::silu;
  auto is_gate_or_up = [](const std::string& name) {
    return name.ends_with("mlp.gate_proj.weight") || name.ends_with("mlp.up_proj.weight") ||
           name.ends_with(".w1.weight") || name.ends_with(".w3.weight");
  };
  for (const WeightSpec& w : weight_specs(cfg, spec)) {
    if (fused_glu && is_gate_or_up(w.name)) continue;
    if (w.shape.size() == 2) {
      // Every matrix the GEMM reads is blocked; an untied embedding is only looked up by row and stays a view.
      const bool lookup_only = w.name == "model.embed_tokens.weight" && !cfg.tie_word_embeddings;
      auto mat = m->store_->matrix(w.name, w.shape[0], w.shape[1],
                                   lookup_only ? cpu::WeightLayout::row_major : cpu::WeightLayout::blocked);
      if (!mat) return Error{mat.error().code, options.model_dir.string() + ": " + mat.error().message};
      matrices[w.name] = *mat;
    } else {
      auto vec = m->store_->vector_f32(w.name, w.shape[0]);
      if (!vec) return Error{vec.error().code, options.model_dir.string() + ": " + vec.error().message};
      vectors[w.name] = std::move(*vec);
    }
  }
  m->embed_ = matrices.at("model.embed_tokens.weight");
  m->lm_head_ = cfg.tie_word_embeddings ? m->embed_ : matrices.at("lm_head.weight");
  m->final_norm_ = std::move(vectors.at("model.norm.weight"));
  m->layers_.resize(cfg.num_layers);
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer& L = m->layers_[l];
    L.attn_norm = std::move(vectors.at(p + "input_layernorm.weight"));
    L.wq = matrices.at(p + "self_attn.q_proj.weight");
    L.wk = matrices.at(p + "self_attn.k_proj.weight");
    L.wv = matrices.at(p + "self_attn.v_proj.weight");
    L.wo = matrices.at(p + "self_attn.o_proj.weight");
    if (spec.qkv_bias) {
      L.bq = std::move(vectors.at(p + "self_attn.q_proj.bias"));
      L.bk = std::move(vectors.at(p + "self_attn.k_proj.bias"));
      L.bv = std::move(vectors.at(p + "self_attn.v_proj.bias"));
    }
    L.ffn_norm = std::move(vectors.at(p + "post_attention_layernorm.weight"));
    // gate, up, down of one MLP (dense or an expert).
    auto load_mlp = [&](const std::string& gate, const std::string& up, const std::string& down) -> Result<Expert> {
      Expert e;
      e.down = matrices.at(down);
      if (!fused_glu) {
        e.gate = matrices.at(gate);
        e.up = matrices.at(up);
        return e;
      }
      auto fused = m->store_->glu_matrix(gate, up, cfg.intermediate_size, cfg.hidden_size);
      if (!fused) return Error{fused.error().code, options.model_dir.string() + ": " + fused.error().message};
      e.gate_up = *fused;
      return e;
    };
    if (spec.num_experts == 0) {
      auto mlp = load_mlp(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight");
      if (!mlp) return mlp.error();
      L.mlp = *mlp;
    } else {
      L.router = matrices.at(p + "block_sparse_moe.gate.weight");
      for (int e = 0; e < spec.num_experts; ++e) {
        const std::string ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        auto expert = load_mlp(ep + "w1.weight", ep + "w3.weight", ep + "w2.weight");
        if (!expert) return expert.error();
        L.experts.push_back(*expert);
      }
    }
  }
  return std::unique_ptr<Model>(std::move(m));
}

void TransformerModel::activate(float* gate, const float* up, int n) const {
  switch (spec_.activation) {
    case Activation::silu:
      cpu::silu_mul(gate, up, n);
      return;
    case Activation::gelu_tanh:
      for (int i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + std::tanh(0.7978845608f * (g + 0.044715f * g * g * g))) * up[i];
      }
      return;
    case Activation::gelu:
      for (int i = 0; i < n; ++i) gate[i] = 0.5f * gate[i] * (1.0f + std::erf(gate[i] * 0.70710678f)) * up[i];
      return;
  }
}

void TransformerModel::mlp(const Expert& e, const float* x, float* out, int n, cpu::ThreadPool& pool) {
  const int ff = cfg_.intermediate_size;
  gate_.resize(size_t(n) * ff);
  if (e.gate_up.data) {
    cpu::gemm_nt_glu(x, e.gate_up, ff, gate_.data(), n, pool, isa_);
    cpu::gemm_nt(gate_.data(), e.down, nullptr, out, n, pool, {isa_});
    return;
  }
  up_.resize(size_t(n) * ff);
  const cpu::GemmOutput gate_up[] = {{&e.gate, nullptr, gate_.data()}, {&e.up, nullptr, up_.data()}};
  cpu::gemm_nt_multi(x, gate_up, 2, n, pool, {isa_});
  activate(gate_.data(), up_.data(), n * ff);
  cpu::gemm_nt(gate_.data(), e.down, nullptr, out, n, pool, {isa_});
}

// Mixtral routing, as HF computes it: softmax over all experts in f32, keep the top k, renormalise them to 1.
void TransformerModel::moe(const Layer& L, int n, cpu::ThreadPool& pool) {
  const int h = cfg_.hidden_size, n_exp = spec_.num_experts, top_k = spec_.experts_per_token;
  router_logits_.resize(size_t(n) * n_exp);
  cpu::gemm_nt(xn_.data(), L.router, nullptr, router_logits_.data(), n, pool, {isa_});
  routed_.assign(n_exp, {});
  std::vector<std::pair<float, int>> probs(n_exp);
  for (int t = 0; t < n; ++t) {
    const float* lg = router_logits_.data() + size_t(t) * n_exp;
    const float mx = *std::max_element(lg, lg + n_exp);
    float sum = 0.0f;
    for (int e = 0; e < n_exp; ++e) sum += (probs[e].first = std::exp(lg[e] - mx));
    for (int e = 0; e < n_exp; ++e) {
      probs[e].first /= sum;
      probs[e].second = e;
    }
    std::partial_sort(probs.begin(), probs.begin() + top_k, probs.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    float kept = 0.0f;
    for (int i = 0; i < top_k; ++i) kept += probs[i].first;
    for (int i = 0; i < top_k; ++i) routed_[probs[i].second].emplace_back(t, probs[i].first / kept);
  }
  std::fill(tmp_.begin(), tmp_.begin() + size_t(n) * h, 0.0f);
  for (int e = 0; e < n_exp; ++e) {
    const auto& tokens = routed_[e];
    if (tokens.empty()) continue;
    const int ne = static_cast<int>(tokens.size());
    xe_.resize(size_t(ne) * h);
    ye_.resize(size_t(ne) * h);
    for (int i = 0; i < ne; ++i) std::copy_n(xn_.data() + size_t(tokens[i].first) * h, h, xe_.data() + size_t(i) * h);
    mlp(L.experts[e], xe_.data(), ye_.data(), ne, pool);
    for (int i = 0; i < ne; ++i) {
      float* dst = tmp_.data() + size_t(tokens[i].first) * h;
      const float* src = ye_.data() + size_t(i) * h;
      const float w = tokens[i].second;
      for (int d = 0; d < h; ++d) dst[d] += w * src[d];
    }
  }
}

void TransformerModel::attention(const ForwardBatch& batch, KvCache& kv, int l, cpu::ThreadPool& pool) {
  const int hd = cfg_.head_dim, nh = cfg_.num_heads, nkv = cfg_.num_kv_heads;
  const int q_dim = nh * hd, kv_dim = nkv * hd, bs = kv.block_size();
  for (const SeqSlice& s : batch.seqs) {
    for (int i = 0; i < s.num_tokens; ++i) {
      const int t = s.first_token + i, pos = s.start_pos + i;
      cpu::rope_rotate_half(q_.data() + size_t(t) * q_dim, nh, hd, pos, inv_freq_.data());
      cpu::rope_rotate_half(k_.data() + size_t(t) * kv_dim, nkv, hd, pos, inv_freq_.data());
      kv.write(l, s.block_table[pos / bs], pos % bs, k_.data() + size_t(t) * kv_dim, v_.data() + size_t(t) * kv_dim);
    }
  }
  // Tasks of (sequence, query heads): a prefill's heads one by one (each a tiled product), a decode's in groups (one
  // sequential read of each K/V block for all of them).
  int n_decode = 0;
  for (const SeqSlice& s : batch.seqs) n_decode += s.num_tokens == 1;
  const int decode_heads = cpu::decode_heads_per_task(nh, nkv, std::max(1, n_decode), pool.size());
  const int window = spec_.sliding_window.empty() ? 0 : spec_.sliding_window[static_cast<size_t>(l)];
  attention_tasks_.clear();
  for (int i = 0; i < static_cast<int>(batch.seqs.size()); ++i) {
    const int step = batch.seqs[i].num_tokens == 1 ? decode_heads : 1;
    for (int h = 0; h < nh; h += step) attention_tasks_.push_back({i, h, std::min(nh, h + step)});
  }
  pool.parallel_for(static_cast<int>(attention_tasks_.size()), [&](int task) {
    const AttentionTask& at = attention_tasks_[task];
    const SeqSlice& s = batch.seqs[at.seq];
    cpu::PagedAttentionParams p;
    p.q = q_.data() + size_t(s.first_token) * q_dim;
    p.out = attn_.data() + size_t(s.first_token) * q_dim;
    p.n_tokens = s.num_tokens;
    p.start_pos = s.start_pos;
    p.n_heads = nh;
    p.n_kv_heads = nkv;
    p.head_begin = at.head_begin;
    p.head_end = at.head_end;
    p.sliding_window = window;
    p.head_dim = hd;
    p.block_size = bs;
    p.block_table = s.block_table;
    p.k_base = kv.keys(l);
    p.v_base = kv.values(l);
    p.kv_dtype = kv.dtype();
    p.block_stride = kv.block_stride();
    p.head_stride = kv.head_stride();
    cpu::paged_attention(p, isa_);
  });
}

void TransformerModel::forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                               cpu::ThreadPool& pool) {
  if (static_cast<int>(batch.tokens.size()) <= kMicroBatchTokens) return forward_micro_batch(batch, kv, logits, pool);
  logits.clear();
  micro_.tokens.clear();
  micro_.seqs.clear();
  auto flush = [&] {
    if (micro_.tokens.empty()) return;
    forward_micro_batch(micro_, kv, micro_logits_, pool);
    logits.insert(logits.end(), micro_logits_.begin(), micro_logits_.end());
    micro_.tokens.clear();
    micro_.seqs.clear();
  };
  for (const SeqSlice& s : batch.seqs) {
    for (int done = 0; done < s.num_tokens;) {
      if (static_cast<int>(micro_.tokens.size()) == kMicroBatchTokens) flush();
      const int take = std::min(s.num_tokens - done, kMicroBatchTokens - static_cast<int>(micro_.tokens.size()));
      SeqSlice piece = s;
      piece.first_token = static_cast<int32_t>(micro_.tokens.size());
      piece.num_tokens = take;
      piece.start_pos = s.start_pos + done;
      piece.want_logits = s.want_logits && done + take == s.num_tokens;
      micro_.tokens.insert(micro_.tokens.end(), batch.tokens.begin() + s.first_token + done,
                           batch.tokens.begin() + s.first_token + done + take);
      micro_.seqs.push_back(piece);
      done += take;
    }
  }
  flush();
}

void TransformerModel::forward_micro_batch(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                                           cpu::ThreadPool& pool) {
  const int n = static_cast<int>(batch.tokens.size());
  const int h = cfg_.hidden_size, q_dim = cfg_.num_heads * cfg_.head_dim, kv_dim = cfg_.num_kv_heads * cfg_.head_dim;
  x_.resize(size_t(n) * h);
  xn_.resize(size_t(n) * h);
  tmp_.resize(size_t(n) * h);
  q_.resize(size_t(n) * q_dim);
  k_.resize(size_t(n) * kv_dim);
  v_.resize(size_t(n) * kv_dim);
  attn_.resize(size_t(n) * q_dim);

  for (int t = 0; t < n; ++t) {
    const int id = batch.tokens[t];
    ACTORD_CHECK(id >= 0 && id < cfg_.vocab_size);
    cpu::weight_row_to_f32(embed_, id, x_.data() + size_t(t) * h);
  }
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const Layer& L = layers_[l];
    cpu::rms_norm(x_.data(), L.attn_norm.data(), xn_.data(), n, h, cfg_.rms_norm_eps);
    const cpu::GemmOutput qkv[] = {{&L.wq, L.bq.empty() ? nullptr : L.bq.data(), q_.data()},
                                   {&L.wk, L.bk.empty() ? nullptr : L.bk.data(), k_.data()},
                                   {&L.wv, L.bv.empty() ? nullptr : L.bv.data(), v_.data()}};
    cpu::gemm_nt_multi(xn_.data(), qkv, 3, n, pool, {isa_});
    attention(batch, kv, l, pool);
    cpu::gemm_nt(attn_.data(), L.wo, nullptr, tmp_.data(), n, pool, {isa_});
    cpu::add_inplace(x_.data(), tmp_.data(), n * h);
    cpu::rms_norm(x_.data(), L.ffn_norm.data(), xn_.data(), n, h, cfg_.rms_norm_eps);
    if (spec_.num_experts == 0) {
      mlp(L.mlp, xn_.data(), tmp_.data(), n, pool);
    } else {
      moe(L, n, pool);
    }
    cpu::add_inplace(x_.data(), tmp_.data(), n * h);
  }

  // Final norm and LM head only for the rows asked for (xn_ has room for every token's row).
  int n_out = 0;
  for (const SeqSlice& s : batch.seqs) {
    const int rows = s.all_logits ? s.num_tokens : (s.want_logits ? 1 : 0);
    if (rows == 0) continue;
    cpu::rms_norm(x_.data() + size_t(s.first_token + s.num_tokens - rows) * h, final_norm_.data(),
                  xn_.data() + size_t(n_out) * h, rows, h, cfg_.rms_norm_eps);
    n_out += rows;
  }
  logits.resize(size_t(n_out) * cfg_.vocab_size);
  cpu::gemm_nt(xn_.data(), lm_head_, nullptr, logits.data(), n_out, pool, {isa_});
}

}  // namespace actord
