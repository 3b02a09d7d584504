#include "plugins/model_checks.hpp"

#include "plugins/model_footprint.hpp"

#include <algorithm>
#include <cmath>

#include "core/gguf.hpp"
#include "core/quantization.hpp"
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

namespace {

// Bytes per quantized weight in the CPU backend's layout: the code, and per group an f16 scale (and offset).
double quantized_bytes_per_param(const QuantSpec& spec) {
  const double code = spec.kind == QuantKind::int8 ? 1.0 : 0.5;
  return spec.group > 0 ? code + (spec.zero_points ? 4.0 : 2.0) / spec.group : code;
}

// A GGUF file's weights as workers hold them, per weight: float tensors at their size, quantized ones repacked
// (Q8_0 8.5 bits, Q4_0 4.5, Q4_1 and Q4_K 5, Q6_K 7).
double held_bytes_per_param(const GgufFile& file) {
  double bytes = 0, elements = 0;
  for (const GgufTensor& t : file.tensors()) {
    double per = 4;
    switch (t.type) {
      case GgmlType::f32: per = 4; break;
      case GgmlType::f16:
      case GgmlType::bf16: per = 2; break;
      case GgmlType::q8_0: per = 34.0 / 32; break;
      case GgmlType::q4_0: per = 18.0 / 32; break;
      case GgmlType::q4_1:
      case GgmlType::q4_k: per = 20.0 / 32; break;
      case GgmlType::q6_k: per = 14.0 / 16; break;
      default: per = 2; break;
    }
    bytes += per * double(t.elements());
    elements += double(t.elements());
  }
  return elements > 0 ? bytes / elements : 2.0;
}

}  // namespace

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
  m.weight_bytes_per_param = static_cast<double>(dtype_size(m.weight_dtype));
  m.weight_format = dtype_config_name(m.weight_dtype);
  const uint64_t params = estimated_num_parameters(m.config);
  // Bytes per weight when `kept` of the weights stay in the dtype and the others take `per_quantized` bytes each.
  auto mixed = [&](double kept, double per_quantized) {
    return params > 0 ? (kept * m.weight_bytes_per_param + (double(params) - kept) * per_quantized) / double(params)
                      : per_quantized;
  };
  if (GgufFile::is_gguf(topology.model.path)) {
    auto file = GgufFile::open(topology.model.path);
    if (!file) return file.error();
    m.weight_bytes_per_param = held_bytes_per_param(*file);
    std::vector<std::string> types;
    for (const GgufTensor& t : file->tensors()) {
      const std::string name = ggml_type_name(t.type);
      if (t.dims.size() >= 2 && std::find(types.begin(), types.end(), name) == types.end()) types.push_back(name);
    }
    m.weight_format = "GGUF";
    for (size_t i = 0; i < types.size(); ++i) m.weight_format += (i ? ", " : " ") + types[i];
  } else if (const auto& cq = m.config.checkpoint_quantization; cq.enabled()) {
    // AWQ / GPTQ: the linear layers' codes with an f16 scale and offset per group; embeddings and lm_head as stored.
    const double per_quantized = cq.bits / 8.0 + (cq.group_size > 0 ? 4.0 / cq.group_size : 0.0);
    m.weight_format = (cq.method == "awq" ? "AWQ " : "GPTQ ") + std::to_string(cq.bits) + "-bit, " +
                      (cq.group_size > 0 ? "groups of " + std::to_string(cq.group_size) : std::string("per channel"));
    const double embeddings = double(m.config.vocab_size) * m.config.hidden_size * (m.config.tie_word_embeddings ? 1 : 2);
    m.weight_bytes_per_param = mixed(embeddings, per_quantized);
  } else if (auto kind = parse_quant_kind(topology.model.quantization); kind && *kind != QuantKind::none) {
    auto spec = make_quant_spec(*kind, topology.model.quantization_group, topology.model.quantization_zero_points);
    if (!spec) return make_error(spec.error().code, where + "model.quantization: " + spec.error().message);
    // Every multiplied matrix quantized; an embedding only looked up (untied) keeps the dtype.
    const double embedding = m.config.tie_word_embeddings ? 0.0 : double(m.config.vocab_size) * m.config.hidden_size;
    m.weight_format = describe(*spec);
    m.weight_bytes_per_param = mixed(embedding, quantized_bytes_per_param(*spec));
  }
  m.estimated_weight_bytes = static_cast<uint64_t>(std::min(1.8e19, std::ceil(double(params) * m.weight_bytes_per_param)));
  for (const LoraModule& module : topology.lora.modules) {
    auto adapter = LoraAdapter::open(module, m.config, topology.lora.max_lora_rank);
    if (!adapter) return make_error(adapter.error().code, where + adapter.error().message);
    m.estimated_weight_bytes += (*adapter)->bytes();
    m.lora.push_back(std::move(*adapter));
  }
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
