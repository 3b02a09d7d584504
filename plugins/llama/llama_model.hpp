// The Llama family (LlamaForCausalLM) on the CPU backend, f32 compute.
//
// Contract: create() loads `model.safetensors` from the model folder, checks every tensor's presence and shape
// (errors name the tensor, expected and found shapes), and converts weights to f32. forward() follows Model.
#pragma once

#include <memory>
#include <vector>

#include "plugins/model_registry.hpp"

namespace actord {

class LlamaModel final : public Model {
 public:
  static Result<std::unique_ptr<Model>> create(const ModelConfig& config, const ModelLoadOptions& options);

  const ModelConfig& config() const override { return cfg_; }
  void forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits) override;

 private:
  struct Layer {
    std::vector<float> attn_norm;   // [hidden]
    std::vector<float> wq;          // [n_heads * head_dim, hidden]
    std::vector<float> wk;          // [n_kv_heads * head_dim, hidden]
    std::vector<float> wv;          // [n_kv_heads * head_dim, hidden]
    std::vector<float> wo;          // [hidden, n_heads * head_dim]
    std::vector<float> ffn_norm;    // [hidden]
    std::vector<float> w_gate;      // [intermediate, hidden]
    std::vector<float> w_up;        // [intermediate, hidden]
    std::vector<float> w_down;      // [hidden, intermediate]
  };

  explicit LlamaModel(const ModelConfig& cfg) : cfg_(cfg) {}

  ModelConfig cfg_;
  std::vector<float> embed_;        // [vocab, hidden]
  std::vector<float> final_norm_;   // [hidden]
  std::vector<float> lm_head_;      // [vocab, hidden]; empty when tied to embed_
  std::vector<Layer> layers_;

  // Scratch reused across steps (the worker calls forward from one thread).
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, scores_;
};

}  // namespace actord
