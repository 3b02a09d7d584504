// The API of out-of-tree plugins: a shared library that adds model families and/or scheduling policies to actord.
//
// A plugin is listed in the topology (`plugins: [path/libmy_plugin.so]`, relative to the YAML file) and loaded by
// the engine's process (models and policies) and by every process that runs a worker (models), before anything is
// created. It exports the version and at least one of the two register functions:
//
//   extern "C" uint32_t actord_plugin_api_version();                                // ACTORD_PLUGIN_API_VERSION
//   extern "C" int actord_plugin_register(actord::ModelRegistry* registry);           // models; 0 on success
//   extern "C" int actord_plugin_register_policies(actord::PolicyRegistry* registry); // policies; 0 on success
//
// ACTORD_PLUGIN(register_fn) defines the version and the model register function (a model plugin);
// ACTORD_POLICY_PLUGIN(register_fn) the version and the policy register function (a scheduling policy plugin);
// a plugin with both writes ACTORD_PLUGIN_VERSION(), ACTORD_PLUGIN_MODELS(fn) and ACTORD_PLUGIN_POLICIES(fn).
// Model factories are keyed by the HF `architectures[0]` name, typically building on TransformerModel
// (plugins/transformer/transformer_model.hpp) with its own TransformerSpec, or implementing Model
// (plugins/model.hpp) from scratch. Policies implement SchedulingPolicy (scheduler/scheduling_policy.hpp) and are
// chosen by name with `scheduler.policy`.
//
// Contract: the plugin is compiled against the same actord headers and compiler as the binary that loads it
// (C++ types cross the boundary; the version number guards against mismatched headers). It resolves actord's
// symbols from the loading executable (actord is linked with exported symbols) and must not link actord's
// libraries itself. Loading is not thread-safe; a plugin is never unloaded. See examples/gelu_llama_plugin/ and
// examples/shortest_prompt_first/.
#pragma once

#include <cstdint>

#include "plugins/model_registry.hpp"
#include "scheduler/policy_registry.hpp"

// Raised whenever a type that crosses the boundary changes layout. 2: ModelConfig (rotary_dim, LongRoPE / YaRN
// fields, weight_prefix), ModelLoadOptions::max_model_len, exec::AttentionShape (rotary_dim, rotary_scale),
// TransformerSpec (Gemma's fields).
#define ACTORD_PLUGIN_API_VERSION 2u

#define ACTORD_PLUGIN_VERSION()                                                                  \
  extern "C" __attribute__((visibility("default"))) uint32_t actord_plugin_api_version() {      \
    return ACTORD_PLUGIN_API_VERSION;                                                            \
  }

#define ACTORD_PLUGIN_MODELS(register_fn)                                                        \
  extern "C" __attribute__((visibility("default"))) int actord_plugin_register(                 \
      actord::ModelRegistry* registry) {                                                         \
    return register_fn(*registry);                                                               \
  }

#define ACTORD_PLUGIN_POLICIES(register_fn)                                                      \
  extern "C" __attribute__((visibility("default"))) int actord_plugin_register_policies(        \
      actord::PolicyRegistry* registry) {                                                        \
    return register_fn(*registry);                                                               \
  }

#define ACTORD_PLUGIN(register_fn) ACTORD_PLUGIN_VERSION() ACTORD_PLUGIN_MODELS(register_fn)
#define ACTORD_POLICY_PLUGIN(register_fn) ACTORD_PLUGIN_VERSION() ACTORD_PLUGIN_POLICIES(register_fn)
