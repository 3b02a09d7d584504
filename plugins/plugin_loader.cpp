#include "plugins/plugin_loader.hpp"

#include <dlfcn.h>

#include "plugins/plugin_api.hpp"

namespace actord {

Status load_plugin(const std::filesystem::path& library, ModelRegistry& registry) {
  const std::string where = "plugin " + library.string() + ": ";
  std::error_code ec;
  if (!std::filesystem::exists(library, ec)) return make_error(Errc::not_found, where + "no such file");
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return make_error(Errc::invalid_config, where + "cannot load: " + dlerror());
  using version_fn = uint32_t (*)();
  using register_fn = int (*)(ModelRegistry*);
  auto version = reinterpret_cast<version_fn>(dlsym(handle, "actord_plugin_api_version"));
  auto reg = reinterpret_cast<register_fn>(dlsym(handle, "actord_plugin_register"));
  if (!version || !reg) {
    return make_error(Errc::invalid_config, where + "not an actord plugin (actord_plugin_api_version or "
                                                     "actord_plugin_register is missing)");
  }
  if (version() != ACTORD_PLUGIN_API_VERSION) {
    return make_error(Errc::unsupported, where + "built for plugin API " + std::to_string(version()) +
                                             ", this actord has " + std::to_string(ACTORD_PLUGIN_API_VERSION));
  }
  if (reg(&registry) != 0) return make_error(Errc::internal, where + "registration failed");
  return {};
}

}  // namespace actord
