// Loads out-of-tree plugins (plugin_api.hpp) into a model registry and, when given, a policy registry.
//
// Contract: load_plugin() dlopens the library, checks its API version and calls its register functions (the model
// one, and the policy one when `policies` is set). Errors name the file: not found, not a plugin (no version or
// no register function), built for another API version, or registration failed.
// A loaded library stays loaded for the life of the process (its code backs the registry's factories).
#pragma once

#include <filesystem>

#include "plugins/model_registry.hpp"
#include "scheduler/policy_registry.hpp"

namespace actord {

Status load_plugin(const std::filesystem::path& library, ModelRegistry& models, PolicyRegistry* policies = nullptr);

}  // namespace actord
