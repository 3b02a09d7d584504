#include "plugins/model_checks.hpp"

#include "plugins/model_footprint.hpp"
#include "plugins/plugin_loader.hpp"

namespace actord {

Status check_supported(const ModelRegistry& registry, const ModelConfig& model, const std::filesystem::path& model_dir) {
  if (registry.contains(model.architecture)) return {};
  return make_error(Errc::unsupported, model_dir.string() + "/config.json: architecture '" + model.architecture +
                                           "' is not supported (known: " + registry.known_architectures() + ")");
}

Result<int> max_model_len_for(const ModelConfig& model, int configured, const std::string& where) {
  const int len = configured > 0 ? configured : model.max_position_embeddings;
  if (len > model.max_position_embeddings) {
    return make_error(Errc::invalid_config, where + "engine.max_model_len: " + std::to_string(len) +
                                                " exceeds the model's max_position_embeddings (" +
                                                std::to_string(model.max_position_embeddings) + ")");
  }
  return len;
}

Result<CheckedModel> check_model(const TopologyConfig& topology, ModelRegistry& registry, PolicyRegistry& policies) {
  const std::string where = topology.source.string() + ": ";
  for (const auto& plugin : topology.plugins) ACTORD_TRY_STATUS(load_plugin(plugin, registry, &policies));
  if (auto policy = policies.check(topology.scheduler.policy); !policy)
    return make_error(policy.error().code, where + policy.error().message);
  CheckedModel m;
  auto config = ModelConfig::load(topology.model.path);
  if (!config) return config.error();
  m.config = *config;
  ACTORD_TRY_STATUS(check_supported(registry, m.config, topology.model.path));
  auto max_len = max_model_len_for(m.config, topology.engine.max_model_len, where);
  if (!max_len) return max_len.error();
  m.max_model_len = *max_len;
  m.kv_dtype = ModelConfig::kv_cache_dtype(topology.engine.kv_cache_dtype, topology.model.dtype, m.config.torch_dtype);
  m.weight_dtype = ModelConfig::kv_cache_dtype("auto", topology.model.dtype, m.config.torch_dtype);
  m.estimated_weight_bytes = estimated_weight_bytes(m.config, m.weight_dtype);
  return m;
}

ModelShape model_shape(const ModelConfig& c, DType weight_dtype, DType kv_dtype) {
  ModelShape s;
  s.num_layers = c.num_layers;
  s.num_heads = c.num_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.moe_intermediate_size =
      c.moe_intermediate_size > 0 && c.moe_intermediate_size != c.intermediate_size ? c.moe_intermediate_size : 0;
  s.vocab_size = c.vocab_size;
  s.num_experts = c.num_experts;
  s.shared_expert_intermediate_size = c.shared_expert_intermediate_size;
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.attention_bias = c.attention_bias;
  s.weight_bytes_per_param = dtype_size(weight_dtype);
  s.kv_bytes_per_token = c.kv_bytes_per_token(kv_dtype);
  return s;
}

}  // namespace actord
