// The decoder-only transformer that the built-in families share (Llama, Mistral, Qwen2/3, Mixtral, the Qwen MoEs,
// Gemma 2 and 3): RMSNorm, RoPE attention with GQA over the paged KV cache, and a gated MLP or a sparse mixture of experts.
//
// Contract: a family plugin describes what differs (TransformerSpec) and this class declares its weights
// (weight_specs(): HF names, shapes, TP/EP split), loads exactly those from a WeightStore into the rank's executor
// backend (ModelLoadOptions::backend: its memory and layout; matrices stay in their stored dtype), and runs forward()
// as a sequence of that backend's primitives (executors/backend.hpp) in f32: no kernel is called directly, so the
// same model runs on every backend. Errors at load name the tensor. forward() follows Model, and must be given the
// backend the model was loaded into.
//
// Tensor and pipeline parallelism (ModelLoadOptions::place, as Megatron and vLLM split a transformer): a rank loads
// only its stage's layers, its query and KV heads (q/k/v rows, o_proj columns), its rows of the MLP's intermediate
// features (gate/up rows, down columns; every expert's alike) and its vocabulary rows of the embedding and
// lm_head. The partial sums of o_proj and down_proj are all-reduced over the stage's TP group, the embedding is
// looked up where the rank holds the row and all-reduced (vocab-parallel), and the lm_head's vocabulary parts are
// all-gathered, so every rank of the last stage has every logit. Stages hand the hidden states on (pipeline send /
// recv). Sums over ranks run in rank order, so the result differs from one rank's only by float reassociation.
#pragma once

#include <algorithm>
#include <array>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/expert_placement.hpp"
#include "core/topology_plan.hpp"
#include "executors/backend.hpp"
#include "plugins/model.hpp"
#include "plugins/weight_spec.hpp"
#include "plugins/weight_store.hpp"

namespace actord {

// The MLP's gate activation: the backend's own (silu, gelu_tanh, gelu).
using Activation = exec::GatedActivation;

// How a family names its experts' weights: Mixtral's block_sparse_moe.{gate, experts.E.w1/w3/w2}, or the Qwen MoE
// families' mlp.{gate, experts.E.gate_proj/up_proj/down_proj}.
enum class ExpertNaming { mixtral, qwen };

struct TransformerSpec {
  bool qkv_bias = false;
  bool qk_norm = false;         // RMSNorm of each query and key head (self_attn.q_norm / k_norm) before RoPE
  int num_experts = 0;          // 0: dense MLP
  int experts_per_token = 0;
  int expert_intermediate = 0;  // an expert's width; 0: intermediate_size
  bool norm_topk_prob = true;   // renormalise the kept routing weights to sum 1
  int shared_expert_intermediate = 0;  // Qwen2-MoE: a shared expert of this width behind a sigmoid gate; 0: none
  ExpertNaming expert_naming = ExpertNaming::mixtral;
  // [num_layers] which layers' MLP is the mixture of experts; empty: every layer when num_experts > 0
  std::vector<bool> sparse_layers;
  // [num_layers] each layer's attention window (ModelConfig::sliding_window); 0, or an empty list: full causal
  std::vector<int> sliding_window;
  Activation activation = Activation::silu;
  // Gemma: every RMSNorm weight is stored as an offset from this (the norm multiplies by offset + w); 0: as stored.
  float norm_weight_offset = 0.0f;
  // Gemma 2 and 3: the attention's and the MLP's outputs are normalised (post_attention_layernorm,
  // post_feedforward_layernorm) before they join the residual stream, and the MLP's input norm is
  // pre_feedforward_layernorm (post_attention_layernorm is the MLP's input norm otherwise).
  bool sandwich_norms = false;
  // Gemma: the embeddings are multiplied by this before the first layer; 0: not scaled.
  float embedding_scale = 0.0f;
  // The queries' scale on top of attention's 1 / sqrt(head_dim) (Gemma: sqrt(head_dim / query_pre_attn_scalar)):
  // folded into the q_norm weights at load with qk_norm, else a scale of the queries before RoPE.
  float query_scale = 1.0f;
  // Gemma 2: attention scores and final logits capped to cap tanh(x / cap) (0: not capped). A capped attention runs on
  // CPU backends only so far (create() refuses others).
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Layers with a sliding window take RoPE frequencies of their own (ModelConfig::rope_inv_freq_local: Gemma 3).
  bool local_rope = false;
};

// HF's hidden_act names of the activations the backends have: silu; gelu_pytorch_tanh, gelu_new (tanh GELU); gelu.
std::optional<Activation> activation_of(const std::string& hidden_act);

// The spec of the built-in families, from config.json's fields (an activation activation_of() does not know is
// left silu: the registry refuses it first).
TransformerSpec transformer_spec_from_config(const ModelConfig& config);

class TransformerModel final : public Model {
 public:
  static std::vector<WeightSpec> weight_specs(const ModelConfig& config, const TransformerSpec& spec);
  static Result<std::unique_ptr<Model>> create(const ModelConfig& config, const ModelLoadOptions& options,
                                               const TransformerSpec& spec);

  const ModelConfig& config() const override { return cfg_; }
  // An FFN rank of AFD holds no KV cache (no layers).
  KvShape kv_shape() const override {
    return {place_.ffn() ? 0 : shard_.layers.count, std::max(1, shard_.kv_heads.count), cfg_.head_dim,
            shard_.layers.first, shard_.kv_heads.first, cfg_.num_layers, cfg_.num_kv_heads};
  }
  // Steps of more than the backend's forward_piece_tokens() (big prefills) run as consecutive micro-batches of at
  // most that many, cutting sequences where needed (a later piece attends to the K/V the earlier one wrote):
  // activations stay bounded by the piece, whatever the scheduler's token budget.
  Status forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                 const ForwardContext& context) override;
  ExpertLoad expert_load() const override;
  int num_lora_adapters() const override { return num_lora_; }
  std::unique_ptr<Model> twin() const override;
  Status set_expert_placement(std::span<const int32_t> placement, const ForwardContext& context) override;

 private:
  Status forward_micro_batches(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                               const ForwardContext& context);
  Status forward_micro_batch(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                             const ForwardContext& context);
  Status serve_experts(const ForwardContext& context);
  Status embed(const ForwardBatch& batch, const ForwardContext& context);
  Status lm_head(const ForwardBatch& batch, std::vector<float>& logits, const ForwardContext& context);
  struct Expert {
    int ff = 0;                   // intermediate rows this rank holds
    exec::Weight gate, up, down;  // [ff, hidden], [ff, hidden], [hidden, ff]; gate and up unset when fused
    exec::Weight gate_up;         // SiLU models: gate and up fused for Backend::gemm_glu
  };
  struct Layer {
    exec::Buffer attn_norm;             // [hidden]
    exec::Weight wq, wk, wv, wo;        // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
    exec::Buffer bq, bk, bv;            // [q_dim], [kv_dim], [kv_dim]; empty without qkv_bias
    exec::Buffer q_norm, k_norm;        // [head_dim] each; empty without qk_norm
    bool sparse = false;                // the MLP is the mixture of experts
    exec::Buffer ffn_norm;              // [hidden]
    exec::Buffer post_attn_norm, post_ffn_norm;  // [hidden] each: sandwich norms of the sublayers' outputs
    Expert mlp;                         // dense MLP
    exec::Weight router;                // [num_experts, hidden]
    std::vector<Expert> experts;        // ep 1: every expert (TP-split), in order
    ExpertPlacement placement;          // ep > 1: every expert's slots over the ep ranks
    std::vector<Expert> slots;          // ep > 1: this rank's slots of `placement`, in order
    Expert shared;                      // Qwen2-MoE's shared expert (unset: none)
    exec::Weight shared_gate;           // [1, hidden]: its sigmoid gate
    // [adapters][LoraTarget]: each LoRA adapter's delta of the projections it changes (unset: none), sliced as the
    // projection is: a [rank, this rank's inputs], b [this rank's outputs, rank] times the adapter's scaling.
    struct LoraDelta {
      exec::Weight a, b;
    };
    std::vector<std::array<LoraDelta, kLoraTargets>> lora;
  };

  TransformerModel(const ModelConfig& cfg, const TransformerSpec& spec) : cfg_(cfg), spec_(spec) {}
  void attention(const ForwardBatch& batch, KvCache& kv, int layer);
  // out [n, hidden] = the MLP of x [n, hidden], or out += it where accumulate (then tmp_ is its scratch: not out).
  // With `lora`: that layer's adapter deltas of gate, up and down added for the batch's adapter rows.
  void mlp(const Expert& e, const exec::Buffer& x, exec::Buffer& out, int n, bool accumulate = false,
           const Layer* lora = nullptr);
  // Fills routed_ from the router's logits of xn_'s n rows, and counts them in expert_tokens_ (stage layer l).
  void route(const Layer& L, int l, int n);
  // tmp_ = the MoE of xn_'s n rows at stage layer l (under EP: this rank's tokens' routed part, + the shared
  // expert's TP part).
  Status moe(const Layer& L, int l, int n, const ForwardContext& context);
  Status experts_over_ranks(const Layer& L, int n, const ForwardContext& context);
  // AFD: tmp_ = the dense MLP of xn_'s n rows (this rank's share of them), each FFN rank computing its slice.
  Status mlp_over_ffn_ranks(const Layer& L, int n, const ForwardContext& context);
  // AFD: where a layer's FFN lives over the FFN ranks (an MoE layer's experts, a dense MLP's slices).
  ExpertPlacement ffn_placement(bool sparse) const;
  static Result<std::unique_ptr<Model>> create_ffn(std::unique_ptr<TransformerModel> m);
  // Every layer's deltas of options.lora's adapters, sliced for this rank (transformer_lora.cpp).
  Status load_lora(const ModelLoadOptions& options);
  // The batch's token rows per adapter (lora_groups_), before its layers run.
  void group_lora_rows(const ForwardBatch& batch);
  // For each output (a projection of x [n, in] into y [n, out]): y += the deltas of layer L's `target` for the rows
  // of each adapter that changes it. Up to three outputs of the same x (q, k, v) share one pass for their A products.
  struct LoraOutput {
    LoraTarget target;
    exec::Buffer* y;
  };
  void add_lora(const Layer& L, std::initializer_list<LoraOutput> outputs, const exec::Buffer& x, int n);
  // Expert e of (global) layer `layer`, whole, from the weight store into the backend.
  Result<Expert> load_expert(int layer, int e);
  // EPLB: layer L's slots as `next` places them, the experts a rank gains sent by ranks holding them.
  Status move_experts(Layer& L, const ExpertPlacement& next, coll::Communicator& comm, const ForwardContext& context);

  ModelConfig cfg_;
  TransformerSpec spec_;
  exec::Backend* backend_ = nullptr;    // the backend holding the weights; forward() runs on it
  RankPlace place_;
  RankShard shard_;                     // what this rank holds (the whole model when unsharded)
  std::vector<size_t> vocab_counts_;    // [tp] vocabulary rows of each TP rank's lm_head part
  std::shared_ptr<WeightStore> store_;  // keeps weight memory the backend reads in place alive
  exec::Buffer inv_freq_;               // [head_dim / 2]
  exec::Buffer inv_freq_local_;         // [head_dim / 2] of the sliding-window layers (spec_.local_rope); else unset
  float rope_attention_factor_ = 1.0f;  // ModelConfig::rope_attention_factor (the local frequencies take none)
  exec::Weight embed_;                  // [vocab rows of this rank, hidden]
  exec::Weight lm_head_;                // [vocab rows of this rank, hidden]; the embedding when tied
  exec::Buffer final_norm_;             // [hidden]
  std::vector<Layer> layers_;
  int num_lora_ = 0;                    // LoRA adapters served (Layer::lora's size)

  // Scratch in the backend's memory, reused across steps (forward runs on one thread at a time).
  exec::Buffer x_, xn_, q_, k_, v_, attn_, gate_, up_, tmp_;  // [n, ...] activations
  exec::Buffer rows_, normed_rows_;    // the rows logits are asked for, before and after the final norm
  exec::Buffer out_logits_;            // [n_out, vocab]
  exec::Buffer vocab_part_;            // TP: this rank's lm_head rows' logits [n_out, own vocabulary rows]
  exec::Buffer gathered_;              // TP: every rank's vocab_part_, rank after rank
  exec::Buffer router_logits_, xe_, ye_;  // MoE: [n, E], gathered rows [n, hidden], expert out [n, hidden]
  exec::Buffer shared_logits_;         // MoE: [n] the shared expert's gate logits
  std::vector<int32_t> all_rows_;      // MoE: 0 .. n-1
  std::vector<float> router_host_;     // MoE: router_logits_ on the host, for the routing decision
  struct Routed {
    std::vector<int32_t> rows;   // the tokens routed to an expert, in order
    std::vector<float> weights;  // and their routing weights
    // Under EP (experts_over_ranks): the slot serving each row this rank owns, -1 for the others.
    std::vector<int32_t> slots;
  };
  std::vector<Routed> routed_;         // MoE: [E]
  std::vector<uint32_t> expert_tokens_;  // MoE: this forward()'s tokens per [stage layer, expert] (expert_load)
  std::vector<float> shared_weights_;  // MoE: [n] the shared expert's sigmoid gates
  // Expert parallelism (experts_over_ranks): the rows this rank dispatches (its tokens, in send order) with their
  // experts, weights, rows per slot and per-rank element counts; the send buffer (headers and rows); what it
  // received (where each (rank, slot) chunk starts, its rows), its slots' outputs for it, and what came back.
  std::vector<int32_t> ep_send_rows_, ep_send_experts_, ep_order_, ep_sorted_rows_;
  std::vector<float> ep_send_weights_, ep_sorted_weights_;
  std::vector<size_t> ep_slot_rows_, ep_send_counts_, ep_recv_counts_, ep_back_counts_, ep_returned_counts_;
  std::vector<size_t> ep_chunk_first_, ep_chunk_rows_;
  std::vector<float> ep_send_, ep_received_, ep_outputs_, ep_returned_;
  std::vector<int32_t> logit_rows_;    // the token rows logits are asked for
  // LoRA: the current batch's token rows of each adapter it uses (all: every row, nothing gathered); the rows
  // gathered, their products with A and with B.
  struct LoraGroup {
    int adapter = 0;  // 0-based index in Layer::lora
    bool all = false;
    std::vector<int32_t> rows;
    std::vector<float> ones;
  };
  std::vector<LoraGroup> lora_groups_;
  exec::Buffer lora_x_, lora_t_[3], lora_y_;
  ForwardBatch micro_;                 // the current micro-batch of a big step
  std::vector<float> micro_logits_;    // its logits
};

}  // namespace actord
