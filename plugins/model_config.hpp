// The shape of a model, read from an HF `config.json`.
//
// Contract: load() checks every field a forward pass relies on and returns an Error naming the file and the key
// for missing, mistyped, out-of-range or inconsistent values: integers must be JSON integers within the limits
// below (nothing is cut to 32 bits), floats finite and within float's range, and the weight shapes they make must
// stay far from overflowing 64-bit sizes. CAF-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/status.hpp"

namespace actord {

struct ModelConfig {
  // Limits of the sizes load() accepts (inclusive); each is far beyond any published model, and together they keep
  // every product the forward pass forms in int (a 512-token micro-batch times a width) and every weight's element
  // count in int64.
  static constexpr int64_t kMaxWidth = 1 << 20;       // hidden_size, intermediate_size, heads x head_dim
  static constexpr int64_t kMaxVocab = 1 << 24;       // vocab_size
  static constexpr int64_t kMaxCount = 1 << 16;       // num_hidden_layers, heads, head_dim, num_local_experts
  static constexpr int64_t kMaxPositions = 1 << 30;   // max_position_embeddings, original_max_position_embeddings
  static constexpr int64_t kMaxParameters = 1ll << 50;  // all weight elements together

  std::string architecture;  // HF architectures[0], the model registry key (Gemma3ForConditionalGeneration: its
                             // text model's, Gemma3ForCausalLM)
  // Where the checkpoint keeps the text model's tensors: "language_model." in Gemma 3's multimodal checkpoints
  // (text_config; the vision tower is not loaded), else "".
  std::string weight_prefix;
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
  std::string hidden_act = "silu";  // the MLP's gate activation (Gemma 3: hidden_activation)
  std::string torch_dtype = "float32";
  bool attention_bias = false;        // q/k/v projections have biases (Qwen2: always)
  bool qk_norm = false;               // RMSNorm of each query and key head before RoPE (Qwen3, Qwen3-MoE)
  int num_experts = 0;                // MoE (Mixtral num_local_experts, Qwen3-MoE num_experts); 0: dense MLP
  int experts_per_token = 0;          // num_experts_per_tok
  int moe_intermediate_size = 0;      // an expert's width (Qwen3-MoE moe_intermediate_size; else intermediate_size)
  bool norm_topk_prob = true;         // renormalise the top-k routing weights to 1 (Mixtral: always; Qwen: the key)
  int shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert (behind a sigmoid gate); 0: none
  // [num_layers] whether a layer's MLP is the sparse mixture of experts: Mixtral every layer; Qwen3-MoE the layers
  // not in mlp_only_layers with (layer + 1) % decoder_sparse_step == 0 (the others are dense, intermediate_size).
  std::vector<bool> sparse_layers;
  // [num_layers] each layer's attention window (0: full causal attention; W > 0: position p sees p - W + 1 .. p),
  // by Hugging Face's rule for the architecture: Llama never; Mistral and Mixtral `sliding_window` on every layer
  // unless null (absent: Mistral 4096, Mixtral none, as HF's config classes default); Qwen2 only with
  // `use_sliding_window: true`, then `sliding_window` (absent: 4096) on the layers `layer_types` marks
  // "sliding_attention", or without layer_types on layers >= `max_window_layers` (absent: 28); Gemma 2 and 3
  // `sliding_window` (absent: 4096) on the layers `layer_types` marks "sliding_attention", or without layer_types on
  // every layer but each `sliding_window_pattern`-th (absent: Gemma 2 2, Gemma 3 6); any other architecture (a plugin's)
  // `sliding_window` on every layer when set and `use_sliding_window` is not false.
  std::vector<int> sliding_window;
  // Gemma 2 and 3: the attention's scores are scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2 (0:
  // head_dim).
  float query_pre_attn_scalar = 0.0f;
  // Gemma 2 (and Gemma 3 where set): attention scores s become cap tanh(s / cap) before the softmax, and the logits
  // likewise (0: not capped).
  float attn_logit_softcapping = 0.0f;
  float final_logit_softcapping = 0.0f;
  // Gemma 3: the RoPE base of the layers with a sliding window (rope_local_base_freq), applied without rope_scaling;
  // 0: every layer uses rope_theta and rope_scaling.
  float rope_local_theta = 0.0f;

  // The leading dimensions of each head that RoPE rotates: head_dim x partial_rotary_factor (Phi-4-mini: 0.75),
  // even; head_dim when the key is absent.
  int rotary_dim = 0;

  struct RopeScaling {
    std::string type;                 // empty (none) | linear | llama3 | longrope | yarn
    float factor = 1.0f;              // linear, llama3, yarn; longrope: max_position_embeddings / the original
    float low_freq_factor = 1.0f;     // llama3
    float high_freq_factor = 4.0f;    // llama3
    // llama3 (default 8192); longrope (Phi-3: the top-level key, else rope_scaling's, else max_position_embeddings);
    // yarn (rope_scaling's, else max_position_embeddings)
    int original_max_position_embeddings = 8192;
    // longrope: each rotated pair's wavelength factor [rotary_dim / 2], `long_factor` when the served context is longer
    // than original_max_position_embeddings, else `short_factor` (as vLLM and llama.cpp choose: by the context length
    // the engine serves, not per request)
    std::vector<float> short_factor, long_factor;
    // longrope, yarn: cos and sin are multiplied by this (resolved at load: the key `attention_factor`, else longrope
    // sqrt(1 + ln(factor) / ln(original)), yarn 0.1 ln(factor) + 1 (DeepSeek: mscale / mscale_all_dim's ratio))
    float attention_factor = 1.0f;
    float beta_fast = 32.0f, beta_slow = 1.0f;  // yarn: the correction range, in rotations
    bool truncate = true;                        // yarn: the range rounded out to whole dimensions
  } rope_scaling;

  // Weights quantized in the checkpoint (config.json quantization_config): AWQ (AutoAWQ's gemm packing) or GPTQ
  // (AutoGPTQ / optimum: checkpoint_format gptq stores zero points minus one, gptq_v2 as they are). Empty method: none.
  struct CheckpointQuantization {
    std::string method;        // "" | awq | gptq
    int bits = 4;              // 4 (AWQ, GPTQ) or 8 (GPTQ)
    int group_size = 128;      // input features per scale; -1: the whole row
    bool desc_act = false;     // GPTQ act-order: groups given by g_idx
    bool zeros_plus_one = false;
    bool enabled() const { return !method.empty(); }
  } checkpoint_quantization;

  // RoPE inverse frequencies [head_dim / 2] (the first rotary_dim / 2 used, the rest 0), with rope_scaling applied
  // for a served context of context_length tokens (0: max_position_embeddings; only longrope depends on it).
  std::vector<float> rope_inv_freq(int context_length = 0) const;
  // What RoPE multiplies cos and sin by (rope_scaling.attention_factor: longrope, yarn), else 1.
  float rope_attention_factor() const;
  // The sliding-window layers' frequencies where rope_local_theta is set (unscaled); rope_inv_freq() otherwise.
  std::vector<float> rope_inv_freq_local() const;

  // Bytes one token's K and V take over all layers, in f32.
  size_t kv_bytes_per_token(DType kv_dtype) const;
  // The KV cache's element type for engine.kv_cache_dtype and model.dtype (both may be "auto"): an explicit KV dtype
  // wins, then the model's compute dtype, then config.json's torch_dtype (float32 when it names none we store).
  static DType kv_cache_dtype(const std::string& kv_setting, const std::string& model_dtype_setting,
                              const std::string& torch_dtype);

  static Result<ModelConfig> load(const std::filesystem::path& model_dir);
};

}  // namespace actord
