#include "plugins/model_registry.hpp"

#include "plugins/llama/llama_model.hpp"

namespace actord {

ModelRegistry ModelRegistry::with_builtins() {
  ModelRegistry r;
  r.add("LlamaForCausalLM", &LlamaModel::create);
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
