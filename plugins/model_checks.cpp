#include "plugins/model_checks.hpp"

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

}  // namespace actord
