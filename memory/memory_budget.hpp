// Whether a worker's memory asks fit the machine, checked before anything is allocated.
//
// Contract: pure arithmetic. check_memory_fits() refuses an ask whose weights, KV pool and host swap space together
// exceed `available` bytes (the caller reads it: core/host_memory.hpp's MemAvailable for CPU workers), with one
// error that says how much was asked, how much is there and which key to change: the model (model.path) when the
// weights alone do not fit, else engine.kv_cache_memory when weights and KV pool do not, else engine.swap_space.
// `where` prefixes it (the topology file). Errc::resource_exhausted. in_host_memory() is the part of an ask that lives
// in host memory for a group on `device`: all of it for "cpu"; for "cuda" only the swap space (weights and KV pool
// are in device memory, whose allocations fail with errors of their own). plan_fitting() plans a topology on this
// machine and checks what its ranks here hold (actord check, Engine::start and apply, for a topology or for its
// autoscaled groups at their max_replicas).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.hpp"
#include "core/topology_plan.hpp"

namespace actord {

struct MemoryAsk {
  uint64_t weights = 0;  // the model's weights as the worker holds them
  uint64_t kv = 0;       // the KV block pool
  uint64_t swap = 0;     // the host swap space (preemption_mode swap)
};

Status check_memory_fits(const MemoryAsk& ask, uint64_t available, const std::string& where);
MemoryAsk in_host_memory(const MemoryAsk& ask, const std::string& device);

// What the ranks `plan` puts on this machine (its first node) hold, the part in host memory for `device`.
MemoryAsk local_ask(const TopologyPlan& plan, const std::string& device);

// `topology`'s plan on a machine of `cores` cores (plan_topology's errors as they are), once the ranks it puts here
// (on groups[0]'s device) fit `available` bytes (none: not checked; the error prefixed by the topology's file).
Result<TopologyPlan> plan_fitting(const TopologyConfig& topology, const ModelShape& model, unsigned cores,
                                  std::optional<uint64_t> available);

}  // namespace actord
