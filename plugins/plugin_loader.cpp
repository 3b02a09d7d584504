#include "plugins/plugin_loader.hpp"

#include <dlfcn.h>

#include "plugins/plugin_api.hpp"

namespace actord {

Status load_plugin(const std::filesystem::path& library, ModelRegistry& models, PolicyRegistry* policies) {
  const std::string where = "plugin " + library.string() + ": ";
  std::error_code ec;
  if (!std::filesystem::exists(library, ec)) return make_error(Errc::not_found, where + "no such file");
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return make_error(Errc::invalid_config, where + "cannot load: " + dlerror());
  using version_fn = uint32_t (*)();
  using models_fn = int (*)(ModelRegistry*);
  using policies_fn = int (*)(PolicyRegistry*);
  auto version = reinterpret_cast<version_fn>(dlsym(handle, "actord_plugin_api_version"));
  auto register_models = reinterpret_cast<models_fn>(dlsym(handle, "actord_plugin_register"));
  auto register_policies = reinterpret_cast<policies_fn>(dlsym(handle, "actord_plugin_register_policies"));
  if (!version || (!register_models && !register_policies)) {
    return make_error(Errc::invalid_config, where + "not an actord plugin (actord_plugin_api_version, or both "
                                                     "actord_plugin_register and actord_plugin_register_policies, "
                                                     "are missing)");
  }
  if (version() != ACTORD_PLUGIN_API_VERSION) {
    return make_error(Errc::unsupported, where + "built for plugin API " + std::to_string(version()) +
                                             ", this actord has " + std::to_string(ACTORD_PLUGIN_API_VERSION));
  }
  if (register_models && register_models(&models) != 0)
    return make_error(Errc::internal, where + "registration of its models failed");
  if (policies && register_policies && register_policies(policies) != 0)
    return make_error(Errc::internal, where + "registration of its scheduling policies failed");
  return {};
}

}  // namespace actord
