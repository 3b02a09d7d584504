// An out-of-tree model plugin: "GeluLlamaForCausalLM", a Llama whose MLP uses GELU (tanh approximation, HF's
// gelu_pytorch_tanh) instead of SiLU. It reuses actord's TransformerModel with its own spec: a plugin only says
// what differs. Build: see CMakeLists.txt beside this file; use: list the .so under `plugins:` in a topology.
#include "plugins/plugin_api.hpp"
#include "plugins/transformer/transformer_model.hpp"

namespace {

actord::Result<std::unique_ptr<actord::Model>> create_gelu_llama(const actord::ModelConfig& config,
                                                                 const actord::ModelLoadOptions& options) {
  actord::TransformerSpec spec = actord::transformer_spec_from_config(config);
  if (config.hidden_act == "gelu_pytorch_tanh" || config.hidden_act == "gelu_new") {
    spec.activation = actord::Activation::gelu_tanh;
  } else if (config.hidden_act == "gelu") {
    spec.activation = actord::Activation::gelu;
  } else {
    return actord::make_error(actord::Errc::unsupported,
                              "GeluLlamaForCausalLM: hidden_act '" + config.hidden_act + "' is not a GELU");
  }
  return actord::TransformerModel::create(config, options, spec);
}

int register_models(actord::ModelRegistry& registry) {
  registry.add("GeluLlamaForCausalLM", &create_gelu_llama);
  return 0;
}

}  // namespace

ACTORD_PLUGIN(register_models)
