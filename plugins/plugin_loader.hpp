// Loads out-of-tree plugins (plugin_api.hpp) into a model registry.
//
// Contract: load_plugin() dlopens the library, checks its API version and calls its register function. Errors
// name the file: not found, not a plugin (missing symbols), built for another API version, or registration failed.
// A loaded library stays loaded for the life of the process (its code backs the registry's factories).
#pragma once

#include <filesystem>

#include "plugins/model_registry.hpp"

namespace actord {

Status load_plugin(const std::filesystem::path& library, ModelRegistry& registry);

}  // namespace actord
