#include "plugins/llama/llama_model.hpp"

#include <algorithm>

#include "executors/cpu/kernels.hpp"
#include "memory/kv_cache.hpp"
#include "memory/weight_loader.hpp"

namespace actord {

Result<std::unique_ptr<Model>> LlamaModel::create(const ModelConfig& cfg, const ModelLoadOptions& options) {
  if (options.dtype != "float32") {
    return make_error(Errc::unsupported, "dtype '" + options.dtype + "' is not supported by the CPU backend yet (use float32)");
  }
  if (cfg.hidden_act != "silu") {
    return make_error(Errc::unsupported, "hidden_act '" + cfg.hidden_act + "' is not supported (silu only)");
  }
  auto loader = WeightLoader::open(options.model_dir);
  if (!loader) return loader.error();

  std::unique_ptr<LlamaModel> m(new LlamaModel(cfg));
  const int64_t h = cfg.hidden_size, q_dim = int64_t(cfg.num_heads) * cfg.head_dim,
                kv_dim = int64_t(cfg.num_kv_heads) * cfg.head_dim, ff = cfg.intermediate_size, vocab = cfg.vocab_size;
  Error err;
  bool failed = false;
  auto load = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float>& dst) {
    if (failed) return;
    auto t = loader->load_f32(name, shape);
    if (!t) {
      err = Error{t.error().code, options.model_dir.string() + ": " + t.error().message};
      failed = true;
      return;
    }
    dst = std::move(*t);
  };
  load("model.embed_tokens.weight", {vocab, h}, m->embed_);
  load("model.norm.weight", {h}, m->final_norm_);
  if (!cfg.tie_word_embeddings || loader->contains("lm_head.weight")) load("lm_head.weight", {vocab, h}, m->lm_head_);
  m->layers_.resize(cfg.num_layers);
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer& L = m->layers_[l];
    load(p + "input_layernorm.weight", {h}, L.attn_norm);
    load(p + "self_attn.q_proj.weight", {q_dim, h}, L.wq);
    load(p + "self_attn.k_proj.weight", {kv_dim, h}, L.wk);
    load(p + "self_attn.v_proj.weight", {kv_dim, h}, L.wv);
    load(p + "self_attn.o_proj.weight", {h, q_dim}, L.wo);
    load(p + "post_attention_layernorm.weight", {h}, L.ffn_norm);
    load(p + "mlp.gate_proj.weight", {ff, h}, L.w_gate);
    load(p + "mlp.up_proj.weight", {ff, h}, L.w_up);
    load(p + "mlp.down_proj.weight", {h, ff}, L.w_down);
  }
  if (failed) return err;
  return std::unique_ptr<Model>(std::move(m));
}

void LlamaModel::forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits) {
  const int n = static_cast<int>(batch.tokens.size());
  const int h = cfg_.hidden_size, hd = cfg_.head_dim, nh = cfg_.num_heads, nkv = cfg_.num_kv_heads;
  const int q_dim = nh * hd, kv_dim = nkv * hd, ff = cfg_.intermediate_size;
  x_.resize(size_t(n) * h);
  xn_.resize(size_t(n) * h);
  q_.resize(size_t(n) * q_dim);
  k_.resize(size_t(n) * kv_dim);
  v_.resize(size_t(n) * kv_dim);
  attn_.resize(size_t(n) * q_dim);
  gate_.resize(size_t(n) * ff);
  up_.resize(size_t(n) * ff);
  int max_ctx = 0;
  for (const auto& s : batch.seqs) max_ctx = std::max(max_ctx, s.start_pos + s.num_tokens);
  scores_.resize(max_ctx);

  for (int t = 0; t < n; ++t) {
    const int id = batch.tokens[t];
    ACTORD_CHECK(id >= 0 && id < cfg_.vocab_size);
    std::copy_n(embed_.data() + size_t(id) * h, h, x_.data() + size_t(t) * h);
  }
  const int bs = kv.block_size();
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const Layer& L = layers_[l];
    cpu::rms_norm(x_.data(), L.attn_norm.data(), xn_.data(), n, h, cfg_.rms_norm_eps);
    cpu::matmul_nt(xn_.data(), L.wq.data(), q_.data(), n, q_dim, h);
    cpu::matmul_nt(xn_.data(), L.wk.data(), k_.data(), n, kv_dim, h);
    cpu::matmul_nt(xn_.data(), L.wv.data(), v_.data(), n, kv_dim, h);
    for (const SeqSlice& s : batch.seqs) {
      for (int i = 0; i < s.num_tokens; ++i) {
        const int t = s.first_token + i, pos = s.start_pos + i;
        cpu::rope_rotate_half(q_.data() + size_t(t) * q_dim, nh, hd, pos, cfg_.rope_theta);
        cpu::rope_rotate_half(k_.data() + size_t(t) * kv_dim, nkv, hd, pos, cfg_.rope_theta);
        const uint32_t block = s.block_table[pos / bs];
        std::copy_n(k_.data() + size_t(t) * kv_dim, kv_dim, kv.key(l, block, pos % bs));
        std::copy_n(v_.data() + size_t(t) * kv_dim, kv_dim, kv.value(l, block, pos % bs));
      }
      cpu::PagedAttentionParams p;
      p.q = q_.data() + size_t(s.first_token) * q_dim;
      p.out = attn_.data() + size_t(s.first_token) * q_dim;
      p.n_tokens = s.num_tokens;
      p.start_pos = s.start_pos;
      p.n_heads = nh;
      p.n_kv_heads = nkv;
      p.head_dim = hd;
      p.block_size = bs;
      p.block_table = s.block_table;
      p.k_base = kv.key(l, 0, 0);
      p.v_base = kv.value(l, 0, 0);
      p.block_stride = kv.key(l, 1, 0) - kv.key(l, 0, 0);
      p.scratch = scores_.data();
      cpu::paged_attention(p);
    }
    cpu::matmul_nt(attn_.data(), L.wo.data(), xn_.data(), n, h, q_dim);
    cpu::add_inplace(x_.data(), xn_.data(), n * h);
    cpu::rms_norm(x_.data(), L.ffn_norm.data(), xn_.data(), n, h, cfg_.rms_norm_eps);
    cpu::matmul_nt(xn_.data(), L.w_gate.data(), gate_.data(), n, ff, h);
    cpu::matmul_nt(xn_.data(), L.w_up.data(), up_.data(), n, ff, h);
    cpu::silu_mul(gate_.data(), up_.data(), n * ff);
    cpu::matmul_nt(gate_.data(), L.w_down.data(), xn_.data(), n, h, ff);
    cpu::add_inplace(x_.data(), xn_.data(), n * h);
  }

  // Final norm and LM head only for the rows that sample.
  std::vector<int> rows;
  for (const SeqSlice& s : batch.seqs)
    if (s.want_logits) rows.push_back(s.first_token + s.num_tokens - 1);
  const int n_out = static_cast<int>(rows.size());
  logits.resize(size_t(n_out) * cfg_.vocab_size);
  for (int r = 0; r < n_out; ++r) {
    cpu::rms_norm(x_.data() + size_t(rows[r]) * h, final_norm_.data(), xn_.data() + size_t(r) * h, 1, h,
                  cfg_.rms_norm_eps);
  }
  const std::vector<float>& head = lm_head_.empty() ? embed_ : lm_head_;
  cpu::matmul_nt(xn_.data(), head.data(), logits.data(), n_out, cfg_.vocab_size, h);
}

}  // namespace actord
