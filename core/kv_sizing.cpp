#include "core/kv_sizing.hpp"

#include <algorithm>
#include <cstdint>

namespace actord {

Result<KvSizing> size_kv_cache(const EngineSection& engine, uint64_t kv_bytes_per_token, const std::string& where) {
  KvSizing sizing;
  sizing.block_bytes = kv_bytes_per_token * static_cast<uint64_t>(engine.block_size);
  auto blocks_in = [&](const char* key, uint64_t bytes) -> Result<uint32_t> {
    const uint64_t blocks = sizing.block_bytes ? bytes / sizing.block_bytes : 0;
    if (blocks == 0) {
      return make_error(Errc::invalid_config, where + "engine." + key + ": " + std::to_string(bytes) +
                                                  " bytes hold no KV block (one block takes " +
                                                  std::to_string(sizing.block_bytes) + " bytes)");
    }
    return static_cast<uint32_t>(std::min<uint64_t>(blocks, INT32_MAX));  // KvCache counts blocks in int
  };
  auto pool = blocks_in("kv_cache_memory", engine.kv_cache_memory);
  if (!pool) return pool.error();
  sizing.num_blocks = *pool;
  if (engine.preemption_mode == "swap") {
    auto swap = blocks_in("swap_space", engine.swap_space);
    if (!swap) return swap.error();
    sizing.swap_blocks = *swap;
  }
  return sizing;
}

}  // namespace actord
