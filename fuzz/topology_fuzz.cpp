// The topology YAML with --set overrides (core/topology_config: parse_topology).
// Input: the YAML text, then NUL-separated `--set` assignments ("engine.max_num_seqs=8").
// Properties: parse_topology never throws or crashes; an error names the source file; a configuration it accepts
// obeys the rules the rest of the engine relies on.
#include <string>

#include "core/topology_config.hpp"
#include "fuzz_util.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = fuzz::split_nul(data, size, 16);
  TopologyOverrides overrides;
  for (size_t i = 1; i < parts.size(); ++i) overrides.set.push_back(parts[i]);
  auto cfg = parse_topology(parts[0], "fuzz/topology.yaml", overrides);
  if (!cfg) {
    fuzz::require(cfg.error().message.rfind("fuzz/topology.yaml: ", 0) == 0,
                  "error without the file's name: " + cfg.error().message);
    return 0;
  }
  const EngineSection& e = cfg->engine;
  fuzz::require(e.max_num_seqs >= 1 && e.max_num_batched_tokens >= 1, "engine counts below 1 accepted");
  fuzz::require(e.block_size >= 1 && e.block_size <= 256 && (e.block_size & (e.block_size - 1)) == 0,
                "bad block_size accepted");
  fuzz::require(e.kv_cache_memory > 0 && e.max_model_len >= 0, "bad kv_cache_memory / max_model_len accepted");
  fuzz::require(cfg->server.port >= 0 && cfg->server.port < 65536, "bad port accepted");
  fuzz::require(cfg->server.max_request_body > 0 && cfg->server.max_queued_requests >= 1 &&
                    cfg->server.shutdown_timeout_s >= 0,
                "bad server section accepted");
  fuzz::require(!cfg->groups.empty(), "no group");
  for (size_t i = 0; i < cfg->groups.size(); ++i) {
    const GroupSection& g = cfg->groups[i];
    fuzz::require(!g.name.empty() && g.threads >= 0 && g.threads <= 1024, "bad group accepted");
    fuzz::require(g.replicas >= 1 && g.tp >= 1 && g.pp >= 1 && g.replicas <= 4096 && g.tp <= 4096 && g.pp <= 4096,
                  "bad group dimensions accepted");
    for (size_t j = 0; j < i; ++j) fuzz::require(cfg->groups[j].name != g.name, "two groups of one name accepted");
  }
  fuzz::require(e.step_timeout.count() >= 0, "negative step_timeout accepted");
  return 0;
}
