#include "plugins/gguf_model.hpp"

#include <map>

#include "memory/gguf_tensors.hpp"

namespace actord {

using nlohmann::json;

namespace {

// A gemma2 or gemma3 file's keys beyond the shared ones, as llama.cpp reads them (the header states the rules).
Status gemma_keys(const GgufFile& file, const std::string& arch, json& j) {
  const std::string a = arch + ".";
  const bool gemma3 = arch == "gemma3";
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["rms_norm_eps"] = file.number_or(a + "attention.layer_norm_rms_epsilon").value_or(1e-6);
  j["rope_theta"] = file.number_or(a + "rope.freq_base").value_or(gemma3 ? 1e6 : 10000.0);
  if (gemma3) j["rope_local_base_freq"] = file.number_or(a + "rope.freq_base_swa").value_or(10000.0);
  if (!j.contains("head_dim")) j["head_dim"] = 256;
  const int64_t layers = j["num_hidden_layers"].get<int64_t>();
  const bool b27 = layers == (gemma3 ? 62 : 46);
  j["query_pre_attn_scalar"] = b27 ? j["hidden_size"].get<int64_t>() / j["num_attention_heads"].get<int64_t>()
                                   : j["head_dim"].get<int64_t>();
  // No window key: gemma3 none; gemma2 the config's own default (4096, llama.cpp's too).
  const auto window = file.integer_or(a + "attention.sliding_window");
  if (window) j["sliding_window"] = *window > 0 ? json(*window) : json(nullptr);
  else if (gemma3) j["sliding_window"] = nullptr;
  if (const GgufValue* pattern = file.find(a + "attention.sliding_window_pattern")) {
    if (pattern->kind == GgufValue::Kind::array) {
      if (pattern->numbers.size() != static_cast<size_t>(layers)) {
        return make_error(Errc::invalid_config,
                          file.path().string() + ": " + a + "attention.sliding_window_pattern lists " +
                              std::to_string(pattern->numbers.size()) + " layers, block_count is " +
                              std::to_string(layers));
      }
      json types = json::array();
      for (double swa : pattern->numbers) types.push_back(swa != 0 ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
    } else if (auto n = file.integer_or(a + "attention.sliding_window_pattern")) {
      j["sliding_window_pattern"] = *n;
    }
  }
  for (const char* cap : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (const auto v = file.number_or(a + cap)) j[cap] = *v > 0 ? json(*v) : json(nullptr);
  }
  return Status::success();
}

// A phi3 file's keys, as llama.cpp's converter writes them: the rotated dimensions, the pretrained context, and
// LongRoPE's factors as the tensors rope_factors_long / rope_factors_short with attn_factor beside them.
Status phi3_keys(const GgufFile& file, json& j) {
  const int64_t head_dim = j.contains("head_dim")
                               ? j["head_dim"].get<int64_t>()
                               : j["hidden_size"].get<int64_t>() / j["num_attention_heads"].get<int64_t>();
  if (const auto rot = file.integer_or("phi3.rope.dimension_count"); rot && *rot != head_dim && head_dim > 0) {
    j["partial_rotary_factor"] = double(*rot) / double(head_dim);
  }
  if (const auto orig = file.integer_or("phi3.rope.scaling.original_context_length")) {
    j["original_max_position_embeddings"] = *orig;
  }
  const auto window = file.integer_or("phi3.attention.sliding_window");
  j["sliding_window"] = window && *window > 0 ? json(*window) : json(nullptr);
  const GgufTensor* long_factors = file.tensor("rope_factors_long.weight");
  const GgufTensor* short_factors = file.tensor("rope_factors_short.weight");
  if (!long_factors && !short_factors) return Status::success();
  if (!long_factors || !short_factors) {
    return make_error(Errc::invalid_config, file.path().string() + ": rope_factors_long.weight and "
                                            "rope_factors_short.weight come together (LongRoPE), found one");
  }
  json rope = {{"type", "longrope"}};
  for (auto [t, key] : {std::pair{long_factors, "long_factor"}, {short_factors, "short_factor"}}) {
    auto values = gguf_values_f32(*t);
    if (!values) {
      return Error{values.error().code, file.path().string() + ": " + t->name + ": " + values.error().message};
    }
    rope[key] = *values;
  }
  if (const auto factor = file.number_or("phi3.rope.scaling.attn_factor")) rope["attention_factor"] = *factor;
  j["rope_scaling"] = rope;
  return Status::success();
}

}  // namespace

Result<json> hf_config_from_gguf(const GgufFile& file) {
  const std::string where = file.path().string();
  auto arch = file.string("general.architecture");
  if (!arch) return arch.error();
  const std::map<std::string, std::string> known{
      {"llama", "LlamaForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"},
      {"qwen3moe", "Qwen3MoeForCausalLM"},
      {"qwen2moe", "Qwen2MoeForCausalLM"},
      {"gemma2", "Gemma2ForCausalLM"},
      {"gemma3", "Gemma3ForCausalLM"},
      {"phi3", "Phi3ForCausalLM"}};
  const auto it = known.find(*arch);
  if (it == known.end()) {
    return make_error(Errc::unsupported, where + ": general.architecture '" + *arch +
                                             "' is not supported from GGUF (known: gemma2, gemma3, llama, phi3, "
                                             "qwen2, qwen2moe, qwen3, qwen3moe)");
  }
  const std::string a = *arch + ".";
  const int64_t experts = file.integer_or(a + "expert_count").value_or(0);
  const bool qwen_moe = *arch == "qwen3moe" || *arch == "qwen2moe";
  if (experts > 0 && *arch != "llama" && !qwen_moe) {
    return make_error(Errc::unsupported, where + ": mixture-of-experts GGUF files of '" + *arch +
                                             "' are not supported (llama as Mixtral, qwen2moe, qwen3moe are); load "
                                             "the HF folder");
  }
  if (qwen_moe && experts == 0) {
    return make_error(Errc::invalid_config, where + ": " + a + "expert_count is missing or 0 in a " + *arch + " file");
  }
  if (file.tensor("rope_freqs.weight")) {
    return make_error(Errc::unsupported, where + ": rope_freqs.weight (Llama 3.1 RoPE scaling) is not supported from "
                                                 "GGUF yet; load the HF folder");
  }
  json j = json::object();
  j["architectures"] = {experts > 0 && *arch == "llama" ? "MixtralForCausalLM" : it->second};
  j["model_type"] = *arch == "gemma3" ? "gemma3_text" : *arch;
  auto need = [&](const std::string& key, const char* hf_key) -> Status {
    auto v = file.integer(a + key);
    if (!v) return v.error();
    j[hf_key] = *v;
    return Status::success();
  };
  ACTORD_TRY_STATUS(need("embedding_length", "hidden_size"));
  ACTORD_TRY_STATUS(need("feed_forward_length", "intermediate_size"));
  ACTORD_TRY_STATUS(need("block_count", "num_hidden_layers"));
  ACTORD_TRY_STATUS(need("attention.head_count", "num_attention_heads"));
  j["num_key_value_heads"] = file.integer_or(a + "attention.head_count_kv").value_or(j["num_attention_heads"].get<int64_t>());
  if (auto key_length = file.integer_or(a + "attention.key_length")) j["head_dim"] = *key_length;
  j["max_position_embeddings"] = file.integer_or(a + "context_length").value_or(2048);
  j["rms_norm_eps"] = file.number_or(a + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  j["rope_theta"] = file.number_or(a + "rope.freq_base").value_or(10000.0);
  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  const int64_t n_tokens = tokens && tokens->kind == GgufValue::Kind::array ? static_cast<int64_t>(tokens->strings.size()) : 0;
  const GgufTensor* embedding = file.tensor("token_embd.weight");
  if (!embedding || embedding->dims.size() != 2) {
    return make_error(Errc::invalid_config, where + ": no 2-D token_embd.weight tensor");
  }
  j["vocab_size"] = file.integer_or(a + "vocab_size").value_or(n_tokens > 0 ? n_tokens : embedding->rows());
  j["tie_word_embeddings"] = file.tensor("output.weight") == nullptr;
  j["hidden_act"] = "silu";
  // The compute dtype HF would name (it sets the KV cache's under engine.kv_cache_dtype: auto): the embedding's float
  // type, float16 for a quantized one (llama.cpp's KV default).
  j["torch_dtype"] = dtype_config_name(gguf_float_dtype(embedding->type).value_or(DType::f16));
  if (auto type = file.string(a + "rope.scaling.type"); type && *type == "linear") {
    j["rope_scaling"] = {{"type", "linear"}, {"factor", file.number_or(a + "rope.scaling.factor").value_or(1.0)}};
  } else if (type && *type == "yarn") {
    // As llama.cpp applies it: the ramp between beta_fast and beta_slow over the pretrained context, cos and sin
    // times 0.1 ln(factor) + 1, or DeepSeek's ratio when yarn_log_multiplier is set.
    const int64_t context = j["max_position_embeddings"].get<int64_t>();
    json rope = {{"rope_type", "yarn"},
                 {"factor", file.number_or(a + "rope.scaling.factor").value_or(1.0)},
                 {"original_max_position_embeddings",
                  file.integer_or(a + "rope.scaling.original_context_length").value_or(context)}};
    if (const auto fast = file.number_or(a + "rope.scaling.yarn_beta_fast")) rope["beta_fast"] = *fast;
    if (const auto slow = file.number_or(a + "rope.scaling.yarn_beta_slow")) rope["beta_slow"] = *slow;
    if (const auto log_mul = file.number_or(a + "rope.scaling.yarn_log_multiplier"); log_mul && *log_mul != 0.0) {
      rope["mscale"] = 1.0;
      rope["mscale_all_dim"] = *log_mul;
    }
    j["rope_scaling"] = rope;
  } else if (type && *type != "none") {
    return make_error(Errc::unsupported, where + ": " + a + "rope.scaling.type '" + *type + "' is not supported");
  }
  if (*arch == "qwen2" || *arch == "qwen2moe") j["attention_bias"] = true;
  if (experts > 0) {
    // Stacked experts (ffn_*_exps), every layer sparse, the kept routing weights renormalised as llama.cpp's Mixtral
    // and Qwen3-MoE graphs do (its Qwen2-MoE graph keeps them as they are, beside a shared expert).
    auto used = file.integer(a + "expert_used_count");
    if (!used) return used.error();
    j[*arch == "llama" ? "num_local_experts" : "num_experts"] = experts;
    j["num_experts_per_tok"] = *used;
    if (qwen_moe) {
      auto width = file.integer(a + "expert_feed_forward_length");
      if (!width) return width.error();
      j["moe_intermediate_size"] = *width;
      j["norm_topk_prob"] = *arch == "qwen3moe";
    }
    if (*arch == "qwen2moe") {
      auto shared = file.integer(a + "expert_shared_feed_forward_length");
      if (!shared) return shared.error();
      j["shared_expert_intermediate_size"] = *shared;
    }
  }
  if (*arch == "gemma2" || *arch == "gemma3") ACTORD_TRY_STATUS(gemma_keys(file, *arch, j));
  if (*arch == "phi3") ACTORD_TRY_STATUS(phi3_keys(file, j));
  if (auto eos = file.integer_or("tokenizer.ggml.eos_token_id")) j["eos_token_id"] = *eos;
  if (auto bos = file.integer_or("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *bos;
  return j;
}

std::optional<std::string> gguf_tensor_name(const GgufFile& file, const std::string& hf) {
  const auto arch = file.string("general.architecture");
  return gguf_tensor_name(hf, arch ? *arch : std::string());
}

float gguf_norm_shift(const GgufFile& file, const std::string& hf_name) {
  const auto arch = file.string("general.architecture");
  return arch && (*arch == "gemma2" || *arch == "gemma3") && hf_name.ends_with("norm.weight") ? 1.0f : 0.0f;
}

std::optional<std::string> gguf_tensor_name(const std::string& hf, const std::string& architecture) {
  static const std::map<std::string, std::string> top{{"model.embed_tokens.weight", "token_embd.weight"},
                                                      {"model.norm.weight", "output_norm.weight"},
                                                      {"lm_head.weight", "output.weight"}};
  if (auto it = top.find(hf); it != top.end()) return it->second;
  const std::string prefix = "model.layers.";
  if (hf.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  // q/k norms: Qwen3's and Gemma 3's.
  static const std::map<std::string, std::string> parts{
      {"input_layernorm", "attn_norm"},        {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},          {"self_attn.o_proj", "attn_output"},
      {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},  {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},           {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
      // a mixture of experts: the router, and the experts stacked (weight_store_fused.hpp's names)
      {"block_sparse_moe.gate", "ffn_gate_inp"}, {"mlp.gate", "ffn_gate_inp"},
      {"block_sparse_moe.experts.w1", "ffn_gate_exps"}, {"block_sparse_moe.experts.w3", "ffn_up_exps"},
      {"block_sparse_moe.experts.w2", "ffn_down_exps"},  {"mlp.experts.gate_proj", "ffn_gate_exps"},
      {"mlp.experts.up_proj", "ffn_up_exps"},           {"mlp.experts.down_proj", "ffn_down_exps"},
      // Qwen2-MoE's shared expert and its gate
      {"mlp.shared_expert.gate_proj", "ffn_gate_shexp"}, {"mlp.shared_expert.up_proj", "ffn_up_shexp"},
      {"mlp.shared_expert.down_proj", "ffn_down_shexp"}, {"mlp.shared_expert_gate", "ffn_gate_inp_shexp"}};
  // Gemma 2's and 3's sandwich norms.
  static const std::map<std::string, std::string> gemma_parts{
      {"post_attention_layernorm", "post_attention_norm"}, {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"}};
  // Phi-3's fused q/k/v and gate/up (the weight store serves the parts from them; the parts have no tensor).
  static const std::map<std::string, std::string> phi3_parts{{"self_attn.qkv_proj", "attn_qkv"},
                                                             {"mlp.gate_up_proj", "ffn_up"}};
  const size_t last = rest.rfind('.');
  if (last == std::string::npos) return std::nullopt;
  const std::string part = rest.substr(0, last);
  if (architecture == "phi3") {
    if (auto p = phi3_parts.find(part); p != phi3_parts.end()) {
      return "blk." + layer + "." + p->second + rest.substr(last);
    }
    if (part == "mlp.gate_proj" || part == "mlp.up_proj" || part.ends_with("q_proj") || part.ends_with("k_proj") ||
        part.ends_with("v_proj"))
      return std::nullopt;
  }
  if (architecture == "gemma2" || architecture == "gemma3") {
    if (auto g = gemma_parts.find(part); g != gemma_parts.end()) {
      return "blk." + layer + "." + g->second + rest.substr(last);
    }
  }
  auto it = parts.find(part);
  if (it == parts.end()) return std::nullopt;
  return "blk." + layer + "." + it->second + rest.substr(last);
}

std::vector<int64_t> qk_row_order(const GgufFile& file, const std::string& hf_name, int64_t rows) {
  auto arch = file.string("general.architecture");
  if (!arch || *arch != "llama") return {};
  const bool q = hf_name.find("self_attn.q_proj.weight") != std::string::npos;
  const bool k = hf_name.find("self_attn.k_proj.weight") != std::string::npos;
  if (!q && !k) return {};
  const int64_t heads = file.integer_or("llama.attention.head_count").value_or(1);
  const int64_t hidden = file.integer_or("llama.embedding_length").value_or(rows);
  const int64_t head_dim = file.integer_or("llama.attention.key_length").value_or(hidden / std::max<int64_t>(1, heads));
  if (head_dim <= 0 || head_dim % 2 != 0 || rows % head_dim != 0) return {};
  std::vector<int64_t> order(static_cast<size_t>(rows));
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / head_dim, within = r % head_dim;
    const int64_t j = within / half, i = within % half;  // HF row (h, j, i) was written as GGUF row (h, i, j)
    order[static_cast<size_t>(r)] = h * head_dim + 2 * i + j;
  }
  return order;
}

}  // namespace actord
