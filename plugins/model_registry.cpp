#include "plugins/model_registry.hpp"

#include "plugins/transformer/transformer_model.hpp"

namespace actord {

namespace {

// The built-in families all run on TransformerModel; their differences come from config.json (qkv biases for
// Qwen2 and Qwen2-MoE, experts for Mixtral and the Qwen MoE families (Qwen2-MoE's shared one too), q/k norms for
// Qwen3, a sliding window for Mistral, Gemma's norms, scaled embeddings, logit caps (2) and local RoPE (3), Phi-3's
// fused q/k/v and gate/up tensors (split by the weight store), LongRoPE and partial rotary). Gemma 3's multimodal
// checkpoints load as their text model (ModelConfig::load reads text_config).
Result<std::unique_ptr<Model>> create_builtin(const ModelConfig& config, const ModelLoadOptions& options) {
  if (!activation_of(config.hidden_act)) {
    const char* key = config.architecture.starts_with("Gemma") ? "hidden_activation" : "hidden_act";
    return make_error(Errc::unsupported, std::string(key) + " '" + config.hidden_act +
                                             "' is not supported (silu, gelu_pytorch_tanh, gelu_new, gelu)");
  }
  if (config.architecture == "MixtralForCausalLM" && config.num_experts == 0) {
    return make_error(Errc::parse_error, "MixtralForCausalLM needs num_local_experts in config.json");
  }
  if ((config.architecture == "Qwen3MoeForCausalLM" || config.architecture == "Qwen2MoeForCausalLM") &&
      config.num_experts == 0) {
    return make_error(Errc::parse_error, config.architecture + " needs num_experts in config.json");
  }
  return TransformerModel::create(config, options, transformer_spec_from_config(config));
}

}  // namespace

ModelRegistry ModelRegistry::with_builtins() {
  ModelRegistry r;
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM",
                           "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma2ForCausalLM",
                           "Gemma3ForCausalLM", "Phi3ForCausalLM"}) {
    r.add(arch, &create_builtin);
  }
  return r;
}

void ModelRegistry::add(std::string architecture, Factory factory) {
  factories_[std::move(architecture)] = std::move(factory);
}

bool ModelRegistry::contains(const std::string& architecture) const { return factories_.count(architecture) > 0; }

std::string ModelRegistry::known_architectures() const {
  std::string out;
  for (const auto& [name, _] : factories_) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Result<std::unique_ptr<Model>> ModelRegistry::create(const ModelConfig& config, const ModelLoadOptions& options) const {
  auto it = factories_.find(config.architecture);
  if (it == factories_.end()) {
    return make_error(Errc::unsupported, "architecture '" + config.architecture +
                                             "' is not supported (known: " + known_architectures() + ")");
  }
  return it->second(config, options);
}

}  // namespace actord
