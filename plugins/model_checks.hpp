// Checks of a model folder against the plugins and the topology, made before anything starts.
//
// Contract: each returns an error that names the file and the key (config.json's architecture, the topology's
// engine.max_model_len), never aborts.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.hpp"
#include "plugins/model_config.hpp"
#include "plugins/model_registry.hpp"

namespace actord {

// The model's architecture has a plugin (built in or loaded).
Status check_supported(const ModelRegistry& registry, const ModelConfig& model, const std::filesystem::path& model_dir);

// The context length to serve: engine.max_model_len (`configured`; 0 = the model's max_position_embeddings),
// refused above the model's. `where` prefixes the error (the topology file).
Result<int> max_model_len_for(const ModelConfig& model, int configured, const std::string& where);

}  // namespace actord
