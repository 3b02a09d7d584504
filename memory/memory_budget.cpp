#include "memory/memory_budget.hpp"

#include "core/host_memory.hpp"

namespace actord {

MemoryAsk local_ask(const TopologyPlan& plan, const std::string& device) {
  const NodePlan& local = plan.nodes.front();
  return in_host_memory(MemoryAsk{local.weight_bytes, local.kv_pool_bytes, local.swap_bytes}, device);
}

Result<TopologyPlan> plan_fitting(const TopologyConfig& topology, const ModelShape& model, unsigned cores,
                                  std::optional<uint64_t> available) {
  auto plan = plan_topology(topology, model, cores);
  if (!plan || !available) return plan;
  ACTORD_TRY_STATUS(check_memory_fits(local_ask(*plan, topology.groups[0].device), *available,
                                      topology.source.string() + ": "));
  return plan;
}

Status check_memory_fits(const MemoryAsk& ask, uint64_t available, const std::string& where) {
  // Sums saturate: the parts are each below 2^64, their sum need not be.
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  const uint64_t with_kv = add(ask.weights, ask.kv);
  const uint64_t total = add(with_kv, ask.swap);
  if (total <= available) return {};
  const std::string there = format_bytes(available) + " available";
  if (ask.weights > available) {
    return make_error(Errc::resource_exhausted, where + "model.path: the model's weights take " +
                                                    format_bytes(ask.weights) + ", but this machine has only " + there +
                                                    "; use a smaller model or a narrower model.dtype");
  }
  if (with_kv > available) {
    return make_error(Errc::resource_exhausted,
                      where + "engine.kv_cache_memory: the KV cache asks for " + format_bytes(ask.kv) + " (beside " +
                          format_bytes(ask.weights) + " of weights), but this machine has only " + there +
                          "; lower engine.kv_cache_memory to at most " + format_bytes(available - ask.weights));
  }
  return make_error(Errc::resource_exhausted,
                    where + "engine.swap_space: the swap space asks for " + format_bytes(ask.swap) + " (beside " +
                        format_bytes(ask.weights) + " of weights and " + format_bytes(ask.kv) +
                        " of KV cache), but this machine has only " + there + "; lower engine.swap_space to at most " +
                        format_bytes(available - with_kv));
}

MemoryAsk in_host_memory(const MemoryAsk& ask, const std::string& device) {
  if (device != "cuda") return ask;
  return MemoryAsk{0, 0, ask.swap};
}

}  // namespace actord
