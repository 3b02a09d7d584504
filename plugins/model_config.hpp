// The shape of a model, read from an HF `config.json`.
//
// Contract: load() checks every field a forward pass relies on and returns an Error naming the file and the
// field for missing, mistyped or inconsistent values. CAF-free.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/status.hpp"

namespace actord {

struct ModelConfig {
  std::string architecture;  // HF architectures[0], the model registry key
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  std::string torch_dtype = "float32";
  bool attention_bias = false;        // q/k/v projections have biases (Qwen2: always)
  int num_experts = 0;                // MoE (Mixtral num_local_experts); 0: dense MLP
  int experts_per_token = 0;          // Mixtral num_experts_per_tok
  int sliding_window = 0;             // Mistral; 0: none

  struct RopeScaling {
    std::string type;                 // empty (none) | linear | llama3
    float factor = 1.0f;
    float low_freq_factor = 1.0f;     // llama3
    float high_freq_factor = 4.0f;    // llama3
    int original_max_position_embeddings = 8192;  // llama3
  } rope_scaling;

  // RoPE inverse frequencies [head_dim / 2], with rope_scaling applied.
  std::vector<float> rope_inv_freq() const;

  // Bytes one token's K and V take over all layers, in f32.
  size_t kv_bytes_per_token(DType kv_dtype) const;
  // The KV cache's element type for engine.kv_cache_dtype and model.dtype (both may be "auto"): an explicit KV dtype
  // wins, then the model's compute dtype, then config.json's torch_dtype (float32 when it names none we store).
  static DType kv_cache_dtype(const std::string& kv_setting, const std::string& model_dtype_setting,
                              const std::string& torch_dtype);

  static Result<ModelConfig> load(const std::filesystem::path& model_dir);
};

}  // namespace actord
