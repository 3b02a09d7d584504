// Checks of a model folder against the plugins and the topology, made before anything starts.
//
// Contract: each returns an error that names the file and the key (config.json's architecture, the topology's
// engine.max_model_len, the scheduler.policy), never aborts.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.hpp"
#include "core/topology_plan.hpp"
#include "plugins/lora_adapter.hpp"
#include "plugins/model_config.hpp"
#include "core/topology_config.hpp"
#include "plugins/model_registry.hpp"
#include "scheduler/policy_registry.hpp"

namespace actord {

// The model's architecture has a plugin (built in or loaded).
Status check_supported(const ModelRegistry& registry, const ModelConfig& model, const std::filesystem::path& model_dir);

// The context length to serve: engine.max_model_len (`configured`; 0 = the model's max_position_embeddings),
// refused above the model's. `where` prefixes the error (the topology file).
Result<int> max_model_len_for(const ModelConfig& model, int configured, const std::string& where);

// What the checks of a topology's model found: its shape, the dtypes its weights and KV cache are kept in, the
// context length to serve and the weights' estimated size (plugins/model_footprint).
struct CheckedModel {
  ModelConfig config;
  DType weight_dtype = DType::f32;
  DType kv_dtype = DType::f32;
  int max_model_len = 0;
  uint64_t estimated_weight_bytes = 0;
  // Bytes per weight as workers hold them: weight_dtype's size, or less for quantized matrices (model.quantization,
  // or a GGUF file's quantized tensors as the CPU backend repacks them: codes and f16 scales per group).
  double weight_bytes_per_param = 4;
  // How the weights are held, in words: the dtype ("float16"), "int4 (groups of 32)", "AWQ 4-bit, groups of 128",
  // "GGUF Q4_K, Q6_K, F32".
  std::string weight_format;
  // lora.modules, opened and checked against the model (their bytes are in estimated_weight_bytes).
  std::vector<std::shared_ptr<const LoraAdapter>> lora;
};

// The checks every start of a topology makes before anything else (Engine::start, actord check), in this order:
// the topology's plugins loaded into `registry` and `policies`, scheduler.policy known, config.json read, a plugin
// for its architecture, engine.max_model_len, the LoRA adapters of lora.modules. Errors from the topology are prefixed with its file.
Result<CheckedModel> check_model(const TopologyConfig& topology, ModelRegistry& registry, PolicyRegistry& policies);

// What the topology plan (core/topology_plan.hpp) needs of a model: its sizes from config.json, and the element
// sizes of its weights and KV cache as workers hold them (f32 when not given).
ModelShape model_shape(const ModelConfig& config, DType weight_dtype = DType::f32, DType kv_dtype = DType::f32);
inline ModelShape model_shape(const CheckedModel& m) {
  ModelShape s = model_shape(m.config, m.weight_dtype, m.kv_dtype);
  s.weight_bytes_per_param = m.weight_bytes_per_param;
  return s;
}

}  // namespace actord
