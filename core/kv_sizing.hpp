// How many KV blocks a worker's memory settings give (engine.kv_cache_memory, engine.swap_space) for a model.
//
// Contract: pure arithmetic on the topology's engine section and the model's KV bytes per token (K and V of every
// layer, in the KV dtype). An error names the key and says how much one block takes; `where` prefixes it (the
// topology file). Counts are capped at INT32_MAX (whether
// that much memory exists is memory/memory_budget's check).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.hpp"
#include "core/topology_config.hpp"

namespace actord {

struct KvSizing {
  uint64_t block_bytes = 0;   // one block of block_size tokens, every layer
  uint32_t num_blocks = 0;    // of the worker's KV pool
  uint32_t swap_blocks = 0;   // of its host swap space (preemption_mode swap; else 0)
};

Result<KvSizing> size_kv_cache(const EngineSection& engine, uint64_t kv_bytes_per_token, const std::string& where);

}  // namespace actord
