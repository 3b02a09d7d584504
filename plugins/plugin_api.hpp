// The API of out-of-tree plugins: a shared library that adds model families to actord.
//
// A plugin is listed in the topology (`plugins: [path/libmy_model.so]`, relative to the YAML file) and loaded by
// every process that runs a worker, before the model is created. It exports two C symbols:
//
//   extern "C" uint32_t actord_plugin_api_version();            // must return ACTORD_PLUGIN_API_VERSION
//   extern "C" int actord_plugin_register(actord::ModelRegistry* registry);  // 0 on success
//
// ACTORD_PLUGIN(register_fn) defines both. register_fn adds factories to the registry, keyed by the HF
// `architectures[0]` name, typically building on TransformerModel (plugins/transformer/transformer_model.hpp)
// with its own TransformerSpec, or implementing Model (plugins/model.hpp) from scratch.
//
// Contract: the plugin is compiled against the same actord headers and compiler as the binary that loads it
// (C++ types cross the boundary; the version number guards against mismatched headers). It resolves actord's
// symbols from the loading executable (actord is linked with exported symbols) and must not link actord's
// libraries itself. Loading is not thread-safe; a plugin is never unloaded. See examples/gelu_llama_plugin/.
#pragma once

#include <cstdint>

#include "plugins/model_registry.hpp"

#define ACTORD_PLUGIN_API_VERSION 1u

#define ACTORD_PLUGIN(register_fn)                                                               \
  extern "C" __attribute__((visibility("default"))) uint32_t actord_plugin_api_version() {      \
    return ACTORD_PLUGIN_API_VERSION;                                                            \
  }                                                                                              \
  extern "C" __attribute__((visibility("default"))) int actord_plugin_register(                 \
      actord::ModelRegistry* registry) {                                                         \
    return register_fn(*registry);                                                               \
  }
