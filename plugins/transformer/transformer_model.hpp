// The decoder-only transformer that the built-in families share (Llama, Mistral, Qwen2, Mixtral): RMSNorm,
// RoPE attention with GQA over the paged KV cache, and a SiLU-gated MLP or a sparse mixture of experts.
//
// Contract: a family plugin describes what differs (TransformerSpec) and this class declares its weights
// (weight_specs(): HF names, shapes, TP/EP split), loads exactly those from a WeightStore (matrices stay in their
// stored dtype), and runs forward() in f32 on the CPU, multi-threaded through the caller's pool, with the kernels of
// the instruction set ModelLoadOptions::isa names (refused at load when the CPU lacks it). Errors at load name the
// tensor. forward() follows Model.
//
// Tensor and pipeline parallelism (ModelLoadOptions::place, as Megatron and vLLM split a transformer): a rank loads
// only its stage's layers, its query and KV heads (q/k/v rows, o_proj columns), its rows of the MLP's intermediate
// features (gate/up rows, down columns; every expert's alike) and its vocabulary rows of the embedding and
// lm_head. The partial sums of o_proj and down_proj are all-reduced over the stage's TP group, the embedding is
// looked up where the rank holds the row and all-reduced (vocab-parallel), and the lm_head's vocabulary parts are
// all-gathered, so every rank of the last stage has every logit. Stages hand the hidden states on (pipeline send /
// recv). Sums over ranks run in rank order, so the result differs from one rank's only by float reassociation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "executors/cpu/gemm.hpp"
#include "core/topology_plan.hpp"
#include "plugins/model.hpp"
#include "plugins/weight_spec.hpp"
#include "plugins/weight_store.hpp"

namespace actord {

enum class Activation { silu, gelu_tanh, gelu };

struct TransformerSpec {
  bool qkv_bias = false;
  int num_experts = 0;          // 0: dense MLP
  int experts_per_token = 0;
  // [num_layers] each layer's attention window (ModelConfig::sliding_window); 0, or an empty list: full causal
  std::vector<int> sliding_window;
  Activation activation = Activation::silu;
};

// The spec of the built-in families, from config.json's fields.
TransformerSpec transformer_spec_from_config(const ModelConfig& config);

class TransformerModel final : public Model {
 public:
  static std::vector<WeightSpec> weight_specs(const ModelConfig& config, const TransformerSpec& spec);
  static Result<std::unique_ptr<Model>> create(const ModelConfig& config, const ModelLoadOptions& options,
                                               const TransformerSpec& spec);

  const ModelConfig& config() const override { return cfg_; }
  KvShape kv_shape() const override { return {shard_.layers.count, shard_.kv_heads.count, cfg_.head_dim}; }
  // Steps of more than kMicroBatchTokens tokens (big prefills) run as consecutive micro-batches of at most that many,
  // cutting sequences where needed (a later piece attends to the K/V the earlier one wrote): activations stay
  // bounded by the micro-batch, whatever the scheduler's token budget.
  Status forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                 const ForwardContext& context) override;
  static constexpr int kMicroBatchTokens = 512;

 private:
  Status forward_micro_batch(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                             const ForwardContext& context);
  Status embed(const ForwardBatch& batch, const ForwardContext& context);
  Status lm_head(const ForwardBatch& batch, std::vector<float>& logits, const ForwardContext& context);
  struct Expert {
    cpu::WeightMatrix gate, up, down;  // [ff, hidden], [ff, hidden], [hidden, ff]; gate and up unset when fused
    cpu::WeightMatrix gate_up;         // SiLU models: gate and up fused for cpu::gemm_nt_glu
  };
  struct Layer {
    std::vector<float> attn_norm;       // [hidden]
    cpu::WeightMatrix wq, wk, wv, wo;   // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
    std::vector<float> bq, bk, bv;      // [q_dim], [kv_dim], [kv_dim]; empty without qkv_bias
    std::vector<float> ffn_norm;        // [hidden]
    Expert mlp;                         // dense MLP
    cpu::WeightMatrix router;           // [num_experts, hidden]
    std::vector<Expert> experts;        // [num_experts]
  };

  TransformerModel(const ModelConfig& cfg, const TransformerSpec& spec) : cfg_(cfg), spec_(spec) {}
  void attention(const ForwardBatch& batch, KvCache& kv, int layer, cpu::ThreadPool& pool);
  void mlp(const Expert& e, const float* x, float* out, int n, cpu::ThreadPool& pool);
  void moe(const Layer& L, int n, cpu::ThreadPool& pool);
  void activate(float* gate, const float* up, int n) const;

  ModelConfig cfg_;
  TransformerSpec spec_;
  RankPlace place_;
  RankShard shard_;                     // what this rank holds (the whole model when unsharded)
  std::vector<size_t> vocab_counts_;    // [tp] vocabulary rows of each TP rank's lm_head part
  int ff_ = 0;                          // intermediate rows this rank holds
  cpu::Isa isa_ = cpu::Isa::automatic;  // the kernels' instruction set, resolved at load (never automatic after)
  std::shared_ptr<WeightStore> store_;  // keeps the weight memory alive
  std::vector<float> inv_freq_;         // [head_dim / 2]
  cpu::WeightMatrix embed_;             // [vocab, hidden]
  cpu::WeightMatrix lm_head_;           // [vocab, hidden]; the embedding when tied
  std::vector<float> final_norm_;       // [hidden]
  std::vector<Layer> layers_;

  // Scratch reused across steps (forward runs on one thread at a time).
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, tmp_;
  std::vector<float> vocab_part_;  // TP: this rank's lm_head rows' logits [n_out, own vocabulary rows]
  std::vector<float> gathered_;    // TP: every rank's vocab_part_, rank after rank
  std::vector<float> router_logits_, xe_, ye_;   // MoE: [n, E], gathered rows [n, hidden], expert out [n, hidden]
  struct AttentionTask {
    int seq, head_begin, head_end;  // batch.seqs index, query heads [head_begin, head_end)
  };
  std::vector<AttentionTask> attention_tasks_;
  std::vector<std::vector<std::pair<int, float>>> routed_;  // [E] (token, weight)
  ForwardBatch micro_;                 // the current micro-batch of a big step
  std::vector<float> micro_logits_;    // its logits
};

}  // namespace actord
