#include "plugins/transformer/transformer_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "comms/collectives/communicator.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_checks.hpp"
#include "plugins/transformer/transformer_internal.hpp"

namespace actord {

using transformer_detail::expert_names;
using transformer_detail::ExpertNames;
using transformer_detail::timed;

TransformerSpec transformer_spec_from_config(const ModelConfig& c) {
  TransformerSpec spec;
  spec.qkv_bias = c.attention_bias;
  spec.qk_norm = c.qk_norm;
  spec.num_experts = c.num_experts;
  spec.experts_per_token = c.experts_per_token;
  spec.expert_intermediate = c.moe_intermediate_size;
  spec.norm_topk_prob = c.norm_topk_prob;
  spec.shared_expert_intermediate = c.shared_expert_intermediate_size;
  spec.expert_naming = c.architecture == "Qwen3MoeForCausalLM" || c.architecture == "Qwen2MoeForCausalLM"
                           ? ExpertNaming::qwen
                           : ExpertNaming::mixtral;
  spec.sparse_layers = c.sparse_layers;
  spec.sliding_window = c.sliding_window;
  spec.activation = activation_of(c.hidden_act).value_or(Activation::silu);
  if (c.architecture == "Gemma3ForCausalLM" || c.architecture == "Gemma2ForCausalLM") {
    spec.norm_weight_offset = 1.0f;
    spec.sandwich_norms = true;
    // Gemma3TextScaledWordEmbedding, Gemma2Model's normalizer: sqrt(hidden_size) in the weights' dtype.
    const float scale = std::sqrt(static_cast<float>(c.hidden_size));
    const std::optional<DType> dtype = parse_dtype(c.torch_dtype);
    spec.embedding_scale = dtype == DType::bf16   ? bf16_to_f32(f32_to_bf16(scale))
                           : dtype == DType::f16 ? f16_to_f32(f32_to_f16(scale))
                                                 : scale;
    spec.query_scale = std::sqrt(static_cast<float>(c.head_dim) / c.query_pre_attn_scalar);
    spec.local_rope = c.rope_local_theta > 0.0f;
    spec.attn_softcap = c.attn_logit_softcapping;
    spec.final_softcap = c.final_logit_softcapping;
  }
  return spec;
}

std::optional<Activation> activation_of(const std::string& hidden_act) {
  if (hidden_act == "silu" || hidden_act == "swish") return Activation::silu;
  if (hidden_act == "gelu_pytorch_tanh" || hidden_act == "gelu_new") return Activation::gelu_tanh;
  if (hidden_act == "gelu") return Activation::gelu;
  return std::nullopt;
}

namespace {

bool layer_is_sparse(const TransformerSpec& spec, int layer) {
  if (spec.num_experts == 0) return false;
  return spec.sparse_layers.empty() || spec.sparse_layers[static_cast<size_t>(layer)];
}


}  // namespace

std::vector<WeightSpec> TransformerModel::weight_specs(const ModelConfig& c, const TransformerSpec& spec) {
  const int64_t h = c.hidden_size, q_dim = int64_t(c.num_heads) * c.head_dim,
                kv_dim = int64_t(c.num_kv_heads) * c.head_dim, ff = c.intermediate_size, vocab = c.vocab_size;
  const int64_t expert_ff = spec.expert_intermediate > 0 ? spec.expert_intermediate : ff;
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
    if (spec.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, ShardKind::replicated, l});
      specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, ShardKind::replicated, l});
    }
    specs.push_back({p + "post_attention_layernorm.weight", {h}, ShardKind::replicated, l});
    if (spec.sandwich_norms) {
      specs.push_back({p + "pre_feedforward_layernorm.weight", {h}, ShardKind::replicated, l});
      specs.push_back({p + "post_feedforward_layernorm.weight", {h}, ShardKind::replicated, l});
    }
    if (!layer_is_sparse(spec, l)) {
      specs.push_back({p + "mlp.gate_proj.weight", {ff, h}, ShardKind::column, l});
      specs.push_back({p + "mlp.up_proj.weight", {ff, h}, ShardKind::column, l});
      specs.push_back({p + "mlp.down_proj.weight", {h, ff}, ShardKind::row, l});
    } else {
      specs.push_back({expert_names(spec, p, 0).router, {spec.num_experts, h}, ShardKind::replicated, l});
      for (int e = 0; e < spec.num_experts; ++e) {
        const ExpertNames n = expert_names(spec, p, e);
        specs.push_back({n.gate, {expert_ff, h}, ShardKind::expert, l, e});
        specs.push_back({n.up, {expert_ff, h}, ShardKind::expert, l, e});
        specs.push_back({n.down, {h, expert_ff}, ShardKind::expert, l, e});
      }
      if (const int64_t sff = spec.shared_expert_intermediate; sff > 0) {  // split by TP as a dense MLP
        specs.push_back({p + "mlp.shared_expert.gate_proj.weight", {sff, h}, ShardKind::column, l});
        specs.push_back({p + "mlp.shared_expert.up_proj.weight", {sff, h}, ShardKind::column, l});
        specs.push_back({p + "mlp.shared_expert.down_proj.weight", {h, sff}, ShardKind::row, l});
        specs.push_back({p + "mlp.shared_expert_gate.weight", {1, h}, ShardKind::replicated, l});
      }
    }
  }
  return specs;
}

namespace {

bool ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes)
    if (name.ends_with(s)) return true;
  return false;
}

// The rows and columns of `w` that the rank of `shard` holds (MatrixSlice's columns double as a vector's range).
MatrixSlice slice_of(const WeightSpec& w, const RankShard& shard, int head_dim) {
  MatrixSlice all;
  const Range heads{shard.heads.first * head_dim, shard.heads.count * head_dim};
  const Range kv{shard.kv_heads.first * head_dim, shard.kv_heads.count * head_dim};
  const bool vector = w.shape.size() == 1;
  auto rows = [&](Range r) {
    // A vector (a bias of a column-split matrix) splits as the matrix's rows.
    return vector ? MatrixSlice{0, -1, r.first, r.count} : MatrixSlice{r.first, r.count, 0, -1};
  };
  auto cols = [](Range r) { return MatrixSlice{0, -1, r.first, r.count}; };
  switch (w.shard) {
    case ShardKind::replicated:
      return all;
    case ShardKind::vocab:
      return rows(shard.vocab);
    case ShardKind::column:
      if (ends_with_any(w.name, {"q_proj.weight", "q_proj.bias"})) return rows(heads);
      if (ends_with_any(w.name, {"k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"})) return rows(kv);
      if (w.name.find(".shared_expert.") != std::string::npos) return rows(shard.shared_intermediate);
      return rows(shard.intermediate);  // gate_proj, up_proj
    case ShardKind::row:  // o_proj, down_proj (of the dense MLP or the shared expert)
      if (w.name.ends_with("o_proj.weight")) return cols(heads);
      return cols(w.name.find(".shared_expert.") != std::string::npos ? shard.shared_intermediate : shard.intermediate);
    case ShardKind::expert:  // TP splits every expert as a dense MLP: gate/up (w1/w3) by rows, down (w2) by columns
      return ends_with_any(w.name, {".w2.weight", ".down_proj.weight"}) ? cols(shard.expert_intermediate)
                                                                         : rows(shard.expert_intermediate);
  }
  return all;
}


}  // namespace

Result<std::unique_ptr<Model>> TransformerModel::create(const ModelConfig& cfg, const ModelLoadOptions& options,
                                                        const TransformerSpec& spec) {
  if (!spec.sliding_window.empty() && spec.sliding_window.size() != static_cast<size_t>(cfg.num_layers)) {
    return make_error(Errc::invalid_argument,
                      "TransformerSpec: sliding_window lists " + std::to_string(spec.sliding_window.size()) +
                          " layers, the model has " + std::to_string(cfg.num_layers));
  }
  const RankPlace& place = options.place;
  const ModelShape shape = model_shape(cfg);
  if (auto problem = parallelism_problem(shape, place.tp, place.pp, place.ep); !problem.empty())
    return make_error(Errc::invalid_argument, options.model_dir.string() + ": " + problem);
  if (place.afd()) {
    if (auto problem = ffn_pool_problem(shape, place.afd_ffn); !problem.empty())
      return make_error(Errc::invalid_argument, options.model_dir.string() + ": " + problem);
    if (place.pp != 1 || place.ep != 1 || place.redundant_experts != 0 || place.afd_attention % place.tp != 0 ||
        place.ffn_rank >= place.afd_ffn || (place.ffn() && place.tp != 1))
      return make_error(Errc::invalid_argument,
                        "attention-FFN disaggregation: a rank of " + std::to_string(place.afd_attention) +
                            " attention ranks (tp " + std::to_string(place.tp) + ") and " +
                            std::to_string(place.afd_ffn) + " FFN ranks needs pp 1, ep 1 and no redundant experts");
  }
  if (place.lane < 0 || place.lane >= place.lanes())
    return make_error(Errc::invalid_argument, "lane " + std::to_string(place.lane) + " is outside the " +
                                                  std::to_string(place.lanes()) + " attention lanes of ep " +
                                                  std::to_string(place.ep) + " / tp " + std::to_string(place.tp));
  if (place.tp_rank < 0 || place.tp_rank >= place.tp || place.pp_rank < 0 || place.pp_rank >= place.pp) {
    return make_error(Errc::invalid_argument, "rank tp" + std::to_string(place.tp_rank) + ".pp" +
                                                  std::to_string(place.pp_rank) + " is outside tp " +
                                                  std::to_string(place.tp) + " x pp " + std::to_string(place.pp));
  }
  if (!options.backend) return make_error(Errc::invalid_argument, "ModelLoadOptions: no executor backend");
  exec::Backend& backend = *options.backend;
  if (spec.attn_softcap > 0.0f && backend.kind() != exec::DeviceKind::cpu) {
    return make_error(Errc::unsupported, options.model_dir.string() + ": attn_logit_softcapping (Gemma 2) on " +
                                             backend.describe() + ": capped attention runs on CPU ranks only so far");
  }
  if ((place.ep > 1 || place.afd()) && !backend.computes_in_host_memory()) {
    return make_error(Errc::unsupported, (place.afd() ? std::string("attention-FFN disaggregation")
                                                      : "ep " + std::to_string(place.ep)) +
                                             " on " + backend.describe() +
                                             ": expert parallelism runs on CPU ranks only so far");
  }
  auto store = WeightStore::open(cfg, options);
  if (!store) return store.error();
  std::unique_ptr<TransformerModel> m(new TransformerModel(cfg, spec));
  m->backend_ = &backend;
  m->store_ = *store;
  m->inv_freq_ = backend.upload(cfg.rope_inv_freq(options.max_model_len));
  m->rope_attention_factor_ = cfg.rope_attention_factor();
  if (spec.local_rope) m->inv_freq_local_ = backend.upload(cfg.rope_inv_freq_local());
  m->place_ = place;
  m->shard_ = shard_of_rank(shape, place.tp, place.pp, place.tp_rank, place.pp_rank, place.ep, place.lane);
  if (place.ffn()) {
    if (auto lora = m->load_lora(options); !lora) return lora.error();
    return create_ffn(std::move(m));
  }
  for (int r = 0; r < place.tp; ++r)
    m->vocab_counts_.push_back(static_cast<size_t>(shard_of_rank(shape, place.tp, place.pp, r, place.pp_rank).vocab.count));
  const RankShard& shard = m->shard_;
  auto in_stage = [&](int layer) { return layer >= shard.layers.first && layer < shard.layers.first + shard.layers.count; };
  const bool tied_head = cfg.tie_word_embeddings && shard.lm_head;  // the embedding serves as this rank's lm_head

  // Load exactly the declared weights this rank holds into the backend: matrices in its layout, vectors as f32.
  std::map<std::string, exec::Weight> matrices;
  std::map<std::string, exec::Buffer> vectors;
  // SiLU-gated MLPs load gate and up fused (one product and no separate activation pass); other activations apply
  // their own function between two plain products.
  // Adapters that change gate or up need the two products apart (their deltas join before the activation).
  const bool lora_changes_glu = std::ranges::any_of(options.lora, [](const auto& a) {
    return a->changes(LoraTarget::gate) || a->changes(LoraTarget::up);
  });
  const bool fused_glu = spec.activation == Activation::silu && !lora_changes_glu;
  auto is_gate_or_up = [](const std::string& name) {
    return ends_with_any(name, {".gate_proj.weight", ".up_proj.weight", ".w1.weight", ".w3.weight"});
  };
  for (const WeightSpec& w : weight_specs(cfg, spec)) {
    if (fused_glu && is_gate_or_up(w.name)) continue;
    if (w.layer >= 0 && !in_stage(w.layer)) continue;
    // EP: the slots' experts are loaded below; AFD: the FFN ranks hold the MLPs and experts.
    if (w.shard == ShardKind::expert && (place.ep > 1 || place.afd())) continue;
    if (place.afd() && ends_with_any(w.name, {".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight"}))
      continue;
    if (w.name == "model.embed_tokens.weight" && !shard.embedding && !tied_head) continue;
    if ((w.name == "lm_head.weight" || w.name == "model.norm.weight") && !shard.lm_head) continue;
    const MatrixSlice slice = slice_of(w, shard, cfg.head_dim);
    if (w.shape.size() == 2) {
      // An embedding that is only looked up by row is not multiplied.
      const bool lookup_only = w.name == "model.embed_tokens.weight" && !tied_head;
      auto mat = m->store_->weight(backend, w.name, w.shape[0], w.shape[1],
                                   lookup_only ? exec::WeightUse::lookup : exec::WeightUse::gemm, slice);
      if (!mat) return Error{mat.error().code, options.model_dir.string() + ": " + mat.error().message};
      matrices[w.name] = std::move(*mat);
    } else {
      auto vec = m->store_->vector_f32(w.name, w.shape[0], slice.col_first, slice.col_count);
      if (!vec) return Error{vec.error().code, options.model_dir.string() + ": " + vec.error().message};
      if (w.name.ends_with("norm.weight")) {  // the norms' weights as they multiply: offset, the query scale
        const float scale = w.name.ends_with("q_norm.weight") ? spec.query_scale : 1.0f;
        for (float& v : *vec) v = (spec.norm_weight_offset + v) * scale;
      }
      vectors[w.name] = backend.upload(*vec);
    }
  }
  if (shard.embedding || tied_head) m->embed_ = matrices.at("model.embed_tokens.weight");
  if (shard.lm_head) {
    m->lm_head_ = tied_head ? m->embed_ : matrices.at("lm_head.weight");
    m->final_norm_ = std::move(vectors.at("model.norm.weight"));
  }
  m->layers_.resize(static_cast<size_t>(shard.layers.count));
  for (int local = 0; local < shard.layers.count; ++local) {
    const std::string p = "model.layers." + std::to_string(shard.layers.first + local) + ".";
    Layer& L = m->layers_[static_cast<size_t>(local)];
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
    if (spec.qk_norm) {
      L.q_norm = std::move(vectors.at(p + "self_attn.q_norm.weight"));
      L.k_norm = std::move(vectors.at(p + "self_attn.k_norm.weight"));
    }
    if (spec.sandwich_norms) {
      L.post_attn_norm = std::move(vectors.at(p + "post_attention_layernorm.weight"));
      L.ffn_norm = std::move(vectors.at(p + "pre_feedforward_layernorm.weight"));
      L.post_ffn_norm = std::move(vectors.at(p + "post_feedforward_layernorm.weight"));
    } else {
      L.ffn_norm = std::move(vectors.at(p + "post_attention_layernorm.weight"));
    }
    // gate, up, down of one MLP (dense or an expert) of `width` intermediate features: this rank's `rows` of them.
    auto load_mlp = [&](const std::string& gate, const std::string& up, const std::string& down, int width,
                        Range rows) -> Result<Expert> {
      Expert e;
      e.ff = rows.count;
      e.down = matrices.at(down);
      if (!fused_glu) {
        e.gate = matrices.at(gate);
        e.up = matrices.at(up);
        return e;
      }
      auto fused = m->store_->glu_weight(backend, gate, up, width, cfg.hidden_size, rows.first, rows.count);
      if (!fused) return Error{fused.error().code, options.model_dir.string() + ": " + fused.error().message};
      e.gate_up = *fused;
      return e;
    };
    const int global = shard.layers.first + local;
    L.sparse = layer_is_sparse(spec, global);
    // AFD: the FFN ranks serve the layer's MLP or experts: their slots' placement (this rank holds no slot).
    if (place.afd()) L.placement = m->ffn_placement(L.sparse);
    if (!L.sparse) {
      if (place.afd()) continue;
      auto mlp = load_mlp(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight",
                          cfg.intermediate_size, shard.intermediate);
      if (!mlp) return mlp.error();
      L.mlp = *mlp;
    } else {
      const int expert_ff = spec.expert_intermediate > 0 ? spec.expert_intermediate : cfg.intermediate_size;
      L.router = matrices.at(expert_names(spec, p, 0).router);
      if (place.ep > 1) {
        L.placement = ExpertPlacement::initial(spec.num_experts, place.ep, place.redundant_experts);
        const int per_rank = L.placement.slots_per_rank;
        for (int s = place.ep_rank() * per_rank; s < (place.ep_rank() + 1) * per_rank; ++s) {
          auto expert = m->load_expert(global, L.placement.slot_expert[size_t(s)]);
          if (!expert) return expert.error();
          L.slots.push_back(*expert);
        }
      } else if (!place.afd()) {
        for (int e = 0; e < spec.num_experts; ++e) {
          const ExpertNames n = expert_names(spec, p, e);
          auto expert = load_mlp(n.gate, n.up, n.down, expert_ff, shard.expert_intermediate);
          if (!expert) return expert.error();
          L.experts.push_back(*expert);
        }
      }
      if (spec.shared_expert_intermediate > 0) {
        const std::string s = p + "mlp.shared_expert.";
        auto shared = load_mlp(s + "gate_proj.weight", s + "up_proj.weight", s + "down_proj.weight",
                               spec.shared_expert_intermediate, shard.shared_intermediate);
        if (!shared) return shared.error();
        L.shared = *shared;
        L.shared_gate = matrices.at(p + "mlp.shared_expert_gate.weight");
      }
    }
  }
  if (auto lora = m->load_lora(options); !lora) return lora.error();
  return std::unique_ptr<Model>(std::move(m));
}

ExpertPlacement TransformerModel::ffn_placement(bool sparse) const {
  return ExpertPlacement::initial(sparse ? spec_.num_experts : place_.afd_ffn, place_.afd_ffn, 0);
}

// An FFN rank of AFD: every layer's FFN as slots of ffn_placement(): a dense MLP's rows [f ff / F, (f + 1) ff / F)
// of its intermediate features (slot f holds "expert" f: the MLP's slice f), an MoE layer's whole experts.
Result<std::unique_ptr<Model>> TransformerModel::create_ffn(std::unique_ptr<TransformerModel> m) {
  const ModelConfig& cfg = m->cfg_;
  const TransformerSpec& spec = m->spec_;
  exec::Backend& backend = *m->backend_;
  const int h = cfg.hidden_size, f = m->place_.ffn_rank, workers = m->place_.afd_ffn;
  m->shard_ = RankShard{};
  m->shard_.layers = {0, cfg.num_layers};
  const int ff = cfg.intermediate_size / workers;
  m->layers_.resize(static_cast<size_t>(cfg.num_layers));
  for (int l = 0; l < cfg.num_layers; ++l) {
    Layer& L = m->layers_[static_cast<size_t>(l)];
    L.sparse = layer_is_sparse(spec, l);
    L.placement = m->ffn_placement(L.sparse);
    const int per_rank = L.placement.slots_per_rank;
    if (L.sparse) {
      for (int s = f * per_rank; s < (f + 1) * per_rank; ++s) {
        auto expert = m->load_expert(l, L.placement.slot_expert[size_t(s)]);
        if (!expert) return expert.error();
        L.slots.push_back(*expert);
      }
      continue;
    }
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    Expert e;
    e.ff = ff;
    auto down = m->store_->weight(backend, p + "down_proj.weight", h, cfg.intermediate_size, exec::WeightUse::gemm,
                                  MatrixSlice{0, -1, int64_t(f) * ff, ff});
    if (!down) return down.error();
    e.down = *down;
    if (spec.activation == Activation::silu) {
      auto fused = m->store_->glu_weight(backend, p + "gate_proj.weight", p + "up_proj.weight", cfg.intermediate_size,
                                         h, int64_t(f) * ff, ff);
      if (!fused) return fused.error();
      e.gate_up = *fused;
    } else {
      for (auto [name, into] : {std::pair{"gate_proj.weight", &e.gate}, {"up_proj.weight", &e.up}}) {
        auto w = m->store_->weight(backend, p + name, cfg.intermediate_size, h, exec::WeightUse::gemm,
                                   MatrixSlice{int64_t(f) * ff, ff, 0, -1});
        if (!w) return w.error();
        *into = *w;
      }
    }
    L.slots.push_back(std::move(e));
  }
  return std::unique_ptr<Model>(std::move(m));
}

void TransformerModel::mlp(const Expert& e, const exec::Buffer& x, exec::Buffer& out, int n, bool accumulate,
                           const Layer* lora) {
  exec::Backend& be = *backend_;
  const size_t ff = static_cast<size_t>(e.ff);
  be.reserve(gate_, size_t(n) * ff);
  if (e.gate_up) {
    be.gemm_glu(x, e.gate_up, e.ff, gate_, n);
  } else {
    be.reserve(up_, size_t(n) * ff);
    const exec::GemmTarget gate_up[] = {{&e.gate, nullptr, &gate_}, {&e.up, nullptr, &up_}};
    be.gemm_multi(x, gate_up, n);
    if (lora) {
      add_lora(*lora, {{LoraTarget::gate, &gate_}, {LoraTarget::up, &up_}}, x, n);
    }
    be.gated_activation(spec_.activation, gate_, up_, size_t(n) * ff);
  }
  if (accumulate) {
    be.gemm_accumulate(gate_, e.down, out, n, tmp_);
  } else {
    be.gemm(gate_, e.down, nullptr, out, n);
  }
  if (lora) add_lora(*lora, {{LoraTarget::down, &out}}, gate_, n);
}

// The weights, layers and placement are handles (shared); the scratch buffers are not: the twin reserves its own.
std::unique_ptr<Model> TransformerModel::twin() const {
  std::unique_ptr<TransformerModel> t(new TransformerModel(*this));
  for (exec::Buffer* b : {&t->x_, &t->xn_, &t->q_, &t->k_, &t->v_, &t->attn_, &t->gate_, &t->up_, &t->tmp_, &t->rows_,
                          &t->normed_rows_, &t->out_logits_, &t->vocab_part_, &t->gathered_, &t->router_logits_, &t->xe_,
                          &t->ye_, &t->shared_logits_, &t->lora_x_, &t->lora_t_[0], &t->lora_t_[1],
                          &t->lora_t_[2], &t->lora_y_})
    *b = exec::Buffer{};
  return t;
}

// l: the layer's index in this stage (its KV cache layer); its global index picks the sliding window.
void TransformerModel::attention(const ForwardBatch& batch, KvCache& kv, int l) {
  exec::AttentionShape shape;
  shape.n_heads = shard_.heads.count;
  shape.n_kv_heads = shard_.kv_heads.count;
  shape.head_dim = cfg_.head_dim;
  shape.sliding_window =
      spec_.sliding_window.empty() ? 0 : spec_.sliding_window[static_cast<size_t>(shard_.layers.first + l)];
  shape.logit_softcap = spec_.attn_softcap;
  shape.rotary_dim = cfg_.rotary_dim;
  const bool local = spec_.local_rope && shape.sliding_window > 0;
  shape.rotary_scale = local ? 1.0f : rope_attention_factor_;
  const exec::Buffer& inv_freq = local ? inv_freq_local_ : inv_freq_;
  exec::KvLayer layer;
  layer.k_base = kv.keys(l);
  layer.v_base = kv.values(l);
  layer.dtype = kv.dtype();
  layer.block_size = kv.block_size();
  layer.block_stride = kv.block_stride();
  layer.head_stride = kv.head_stride();
  backend_->rope_and_store_kv(batch, q_, k_, v_, shape, inv_freq, layer);
  backend_->paged_attention(batch, q_, attn_, shape, layer);
}

Status TransformerModel::forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                                 const ForwardContext& context) {
  if (&context.backend != backend_) {
    return make_error(Errc::invalid_argument, "forward: the context's backend (" + context.backend.describe() +
                                                  ") is not the one the model was loaded into");
  }
  if (context.row_bests) context.row_bests->clear();  // lm_head appends each piece's rows
  auto linked = [](const coll::Communicator* c, int size, int rank) {
    return size == 1 || (c && c->size() == size && c->rank() == rank);
  };
  if (!linked(context.tp, place_.tp, place_.tp_rank) || !linked(context.pipeline, place_.pp, place_.pp_rank) ||
      (place_.ep_group() && !linked(context.ep, place_.ep_group_size(), place_.ep_rank()))) {
    const bool lanes = place_.ep_group();
    return make_error(Errc::invalid_argument, "forward: rank tp" + std::to_string(place_.tp_rank) + ".pp" +
                                                  std::to_string(place_.pp_rank) + " of tp " + std::to_string(place_.tp) +
                                                  " x pp " + std::to_string(place_.pp) +
                                                  (lanes ? " x ep " + std::to_string(place_.ep) : std::string()) +
                                                  (lanes ? " needs its TP, pipeline and EP communicators in the context"
                                                         : " needs its TP and pipeline communicators in the context"));
  }
  expert_tokens_.assign(size_t(shard_.layers.count) * size_t(spec_.num_experts), 0);
  if (place_.ep_group()) {
    // Attention lanes (and AFD's FFN ranks, which have no batch): as many micro-batches as the busiest lane runs;
    // those this rank lacks only serve experts.
    const int n = static_cast<int>(batch.tokens.size());
    const int piece = backend_->forward_piece_tokens();
    const auto micro_batches = [piece](int tokens) { return (tokens + piece - 1) / piece; };
    ACTORD_TRY_STATUS(forward_micro_batches(batch, kv, logits, context));
    for (int m = micro_batches(n); m < micro_batches(std::max(n, context.lane_tokens)); ++m)
      ACTORD_TRY_STATUS(serve_experts(context));
    return {};
  }
  return forward_micro_batches(batch, kv, logits, context);
}

Status TransformerModel::forward_micro_batches(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                                               const ForwardContext& context) {
  const int piece_tokens = backend_->forward_piece_tokens();
  if (static_cast<int>(batch.tokens.size()) <= piece_tokens) return forward_micro_batch(batch, kv, logits, context);
  ForwardContext pieces = context;
  pieces.sampling = nullptr;  // the logit rows of every piece, sampled by the caller
  logits.clear();
  micro_.tokens.clear();
  micro_.seqs.clear();
  auto flush = [&]() -> Status {
    if (micro_.tokens.empty()) return {};
    ACTORD_TRY_STATUS(forward_micro_batch(micro_, kv, micro_logits_, pieces));
    logits.insert(logits.end(), micro_logits_.begin(), micro_logits_.end());
    micro_.tokens.clear();
    micro_.seqs.clear();
    return {};
  };
  for (const SeqSlice& s : batch.seqs) {
    for (int done = 0; done < s.num_tokens;) {
      if (static_cast<int>(micro_.tokens.size()) == piece_tokens) ACTORD_TRY_STATUS(flush());
      const int take = std::min(s.num_tokens - done, piece_tokens - static_cast<int>(micro_.tokens.size()));
      SeqSlice piece = s;
      piece.first_token = static_cast<int32_t>(micro_.tokens.size());
      piece.num_tokens = take;
      piece.start_pos = s.start_pos + done;
      const int first_row = s.num_tokens - s.logit_rows;  // the piece's share of the slice's last logit_rows rows
      piece.logit_rows = std::max(0, done + take - std::max(done, first_row));
      micro_.tokens.insert(micro_.tokens.end(), batch.tokens.begin() + s.first_token + done,
                           batch.tokens.begin() + s.first_token + done + take);
      micro_.seqs.push_back(piece);
      done += take;
    }
  }
  return flush();
}

// x_ = the tokens' embeddings. Vocab-parallel: each TP rank writes the rows it holds (zeros elsewhere) and the sum
// over ranks has every row.
Status TransformerModel::embed(const ForwardBatch& batch, const ForwardContext& context) {
  const int n = static_cast<int>(batch.tokens.size()), h = cfg_.hidden_size;
  for (const int32_t id : batch.tokens) ACTORD_CHECK(id < cfg_.vocab_size && (id >= 0 || backend_->runs_ahead()));
  backend_->embed(batch.tokens, embed_, shard_.vocab.first, x_);
  if (place_.tp > 1) ACTORD_TRY_STATUS(timed(context, [&] { return context.tp->all_reduce(x_.first(size_t(n) * h)); }));
  if (spec_.embedding_scale != 0.0f) backend_->scale(x_, spec_.embedding_scale, size_t(n) * h);
  return {};
}

// The final norm and the lm_head for the rows asked for; with TP, every rank's vocabulary part gathered into whole
// rows; or (ForwardContext::row_bests) each row's best of the ids this rank holds.
Status TransformerModel::lm_head(const ForwardBatch& batch, std::vector<float>& logits, const ForwardContext& context) {
  exec::Backend& be = *backend_;
  const int h = cfg_.hidden_size, vocab = cfg_.vocab_size;
  logit_rows_.clear();
  for (const SeqSlice& s : batch.seqs) {
    for (int r = s.num_tokens - s.logit_rows; r < s.num_tokens; ++r) logit_rows_.push_back(s.first_token + r);
  }
  const int n_out = static_cast<int>(logit_rows_.size());
  const size_t own = place_.tp > 1 ? vocab_counts_[static_cast<size_t>(place_.tp_rank)] : size_t(vocab);
  std::vector<RowBest>* const bests = context.row_bests;  // each row's best of the ids held, no logits
  // The host vector is sized only where logits land in it: a backend computing in host memory writes it in place; a
  // device's rows sampled where they are never come here (resizing would zero-fill rows x vocab floats, 131 MB a
  // step at 256 rows of a 128k vocabulary, on the step's critical path).
  const bool host_memory = be.computes_in_host_memory();
  if (bests || host_memory || n_out == 0) logits.resize(bests ? 0 : size_t(n_out) * vocab);
  const size_t bests_before = bests ? bests->size() : 0;  // forward() runs its batch in pieces: appended
  if (bests) bests->resize(bests_before + size_t(n_out));
  if (n_out == 0) return {};
  be.reserve(rows_, size_t(n_out) * h);
  be.reserve(normed_rows_, size_t(n_out) * h);
  be.gather_rows(x_, logit_rows_, h, rows_);
  be.rms_norm(rows_, final_norm_, normed_rows_, n_out, h, cfg_.rms_norm_eps);
  // Gemma 2's logit cap, on each product's logits where they are (elementwise: before or after gathering alike).
  auto capped = [&](exec::Buffer& b, size_t count) {
    if (spec_.final_softcap > 0.0f) be.softcap(b, spec_.final_softcap, count);
  };
  if (bests) {
    be.reserve(vocab_part_, size_t(n_out) * own);
    be.gemm(normed_rows_, lm_head_, nullptr, vocab_part_, n_out);
    capped(vocab_part_, size_t(n_out) * own);
    be.row_bests(vocab_part_, n_out, static_cast<int>(own), place_.tp > 1 ? shard_.vocab.first : 0,
                 std::span<RowBest>(*bests).subspan(bests_before));
    return {};
  }
  // The logits straight into the caller's vector where the backend computes in host memory.
  std::optional<exec::Buffer> in_place = host_memory ? be.host_view(logits) : std::nullopt;
  if (!in_place) be.reserve(out_logits_, size_t(n_out) * vocab);
  auto download = [&] {
    logits.resize(size_t(n_out) * vocab);
    be.download(out_logits_, 0, logits);
  };
  exec::Buffer& out = in_place ? *in_place : out_logits_;
  // The whole rows sampled where they are when the context asks and the backend can (no logits returned).
  auto sampled_here = [&] {
    const ForwardContext::Sampling* sampling = context.sampling;
    if (!sampling || !sampling->samples || sampling->requests.size() != size_t(n_out)) return false;
    sampling->samples->resize(size_t(n_out));
    if (be.sample_rows(out, n_out, vocab, sampling->requests, *sampling->samples)) {
      logits.clear();
      return true;
    }
    sampling->samples->clear();
    return false;
  };
  if (place_.tp == 1) {
    be.gemm(normed_rows_, lm_head_, nullptr, out, n_out);
    capped(out, size_t(n_out) * vocab);
    if (!sampled_here() && !in_place) download();
    return {};
  }
  be.reserve(vocab_part_, size_t(n_out) * own);
  be.gemm(normed_rows_, lm_head_, nullptr, vocab_part_, n_out);
  capped(vocab_part_, size_t(n_out) * own);
  std::vector<size_t> counts(vocab_counts_.size());
  for (size_t r = 0; r < counts.size(); ++r) counts[r] = size_t(n_out) * vocab_counts_[r];
  be.reserve(gathered_, size_t(n_out) * vocab);
  ACTORD_TRY_STATUS(timed(context, [&] {
    return context.tp->all_gather(vocab_part_.first(size_t(n_out) * own), gathered_.first(size_t(n_out) * vocab),
                                  counts);
  }));
  // gathered_: rank 0's [n_out, v0], then rank 1's [n_out, v1], ...; logits: [n_out, vocab].
  size_t block = 0;
  int column = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    const int v = static_cast<int>(vocab_counts_[r]);
    be.copy_columns(gathered_, block, n_out, v, out, vocab, column);
    block += counts[r];
    column += v;
  }
  if (!sampled_here() && !in_place) download();
  return {};
}

Status TransformerModel::forward_micro_batch(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                                             const ForwardContext& context) {
  const int n = static_cast<int>(batch.tokens.size());
  if (n == 0) {
    logits.clear();
    return {};
  }
  exec::Backend& be = *backend_;
  be.begin_step(batch);
  group_lora_rows(batch);
  const bool lora = !lora_groups_.empty();
  const int h = cfg_.hidden_size, q_dim = shard_.heads.count * cfg_.head_dim,
            kv_dim = shard_.kv_heads.count * cfg_.head_dim;
  const size_t rows = static_cast<size_t>(n);
  be.reserve(x_, rows * h);
  be.reserve(xn_, rows * h);
  be.reserve(tmp_, rows * h);
  be.reserve(q_, rows * q_dim);
  be.reserve(k_, rows * kv_dim);
  be.reserve(v_, rows * kv_dim);
  be.reserve(attn_, rows * q_dim);
  const std::span<float> hidden = x_.first(rows * h), partial = tmp_.first(rows * h);
  // Without TP (nothing to sum between a layer's output product and the residual add) the output products add to
  // x_ in their own epilogue (Backend::gemm_accumulate): a launch fewer each on a device.
  // Sandwich norms normalise the product first.
  const bool residual_in_product = place_.tp == 1 && !spec_.sandwich_norms;

  StepTrace* const trace = context.trace;
  if (trace) trace->layer = -1;
  if (shard_.embedding) {
    TraceScope span(trace, "embed", "compute");
    ACTORD_TRY_STATUS(embed(batch, context));
  } else {
    ACTORD_TRY_STATUS(timed(context, [&] { return context.pipeline->recv(place_.pp_rank - 1, hidden); }));
  }
  for (int l = 0; l < shard_.layers.count; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    if (trace) trace->layer = shard_.layers.first + l;
    {
      TraceScope span(trace, "attention", "compute");
      be.rms_norm(x_, L.attn_norm, xn_, n, h, cfg_.rms_norm_eps);
      const exec::GemmTarget qkv[] = {{&L.wq, &L.bq, &q_}, {&L.wk, &L.bk, &k_}, {&L.wv, &L.bv, &v_}};
      be.gemm_multi(xn_, qkv, n);
      if (lora) {
        add_lora(L, {{LoraTarget::q, &q_}, {LoraTarget::k, &k_}, {LoraTarget::v, &v_}}, xn_, n);
      }
      if (spec_.qk_norm) {  // each head's head_dim features, as rows (q_norm carries the query scale)
        be.rms_norm(q_, L.q_norm, q_, n * shard_.heads.count, cfg_.head_dim, cfg_.rms_norm_eps);
        be.rms_norm(k_, L.k_norm, k_, n * shard_.kv_heads.count, cfg_.head_dim, cfg_.rms_norm_eps);
      } else if (spec_.query_scale != 1.0f) {
        be.scale(q_, spec_.query_scale, rows * q_dim);
      }
      attention(batch, kv, l);
      if (residual_in_product) {
        be.gemm_accumulate(attn_, L.wo, x_, n, tmp_);
      } else {
        be.gemm(attn_, L.wo, nullptr, tmp_, n);
      }
      if (lora) add_lora(L, {{LoraTarget::o, residual_in_product ? &x_ : &tmp_}}, attn_, n);
    }
    if (place_.tp > 1) ACTORD_TRY_STATUS(timed(context, [&] { return context.tp->all_reduce(partial); }));
    if (spec_.sandwich_norms) be.rms_norm(tmp_, L.post_attn_norm, tmp_, n, h, cfg_.rms_norm_eps);
    if (!residual_in_product) be.add(x_, tmp_, rows * h);
    bool mlp_added = false;  // the dense MLP's down product added to x_ itself
    if (place_.afd() && !L.sparse) {  // the FFN ranks' slices of the MLP, summed
      TraceScope span(trace, "mlp", "compute");
      be.rms_norm(x_, L.ffn_norm, xn_, n, h, cfg_.rms_norm_eps);
      ACTORD_TRY_STATUS(mlp_over_ffn_ranks(L, n, context));
    } else if (!L.sparse) {
      TraceScope span(trace, "mlp", "compute");
      be.rms_norm(x_, L.ffn_norm, xn_, n, h, cfg_.rms_norm_eps);
      mlp_added = residual_in_product;
      mlp(L.mlp, xn_, mlp_added ? x_ : tmp_, n, mlp_added, lora ? &L : nullptr);
    } else {
      TraceScope span(trace, "experts", "compute");  // the dispatch and combine inside it are spans of their own
      be.rms_norm(x_, L.ffn_norm, xn_, n, h, cfg_.rms_norm_eps);
      ACTORD_TRY_STATUS(moe(L, l, n, context));
    }
    if (place_.tp > 1) ACTORD_TRY_STATUS(timed(context, [&] { return context.tp->all_reduce(partial); }));
    if (spec_.sandwich_norms) be.rms_norm(tmp_, L.post_ffn_norm, tmp_, n, h, cfg_.rms_norm_eps);
    if (!mlp_added) be.add(x_, tmp_, rows * h);
  }
  if (trace) trace->layer = -1;
  if (!shard_.lm_head) {
    logits.clear();
    return timed(context, [&] { return context.pipeline->send(place_.pp_rank + 1, hidden); });
  }
  TraceScope span(trace, "logits", "compute");
  return lm_head(batch, logits, context);
}

}  // namespace actord
