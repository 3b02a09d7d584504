// The coordinator: turns a validated topology into running actors and supervises them.
//
// Messages: (start_atom) -> (uint32_t errc_or_max, std::string error, caf::actor scheduler): spawns the kv_pool,
// the worker (in a thread, or in its own process for placement: process), loads the model in the worker
// (WorkerInit -> WorkerReady), then spawns the scheduler. On failure errc is the Errc of the error and nothing is
// left running; on success errc is UINT32_MAX. (stop_atom) stops everything it spawned, worker processes included.
// Worker deaths after start are logged here; the requests they carried fail through the scheduler.
#pragma once

#include <caf/fwd.hpp>
#include <chrono>
#include <filesystem>
#include <string>

#include "core/dtype.hpp"
#include "core/topology_config.hpp"
#include "scheduler/batch_scheduler.hpp"
#include "scheduler/policy_registry.hpp"

namespace actord {

class ModelRegistry;

struct CoordinatorParams {
  TopologyConfig topology;
  SchedulerLimits limits;
  uint32_t num_kv_blocks = 0;
  DType kv_dtype = DType::f32;
  std::filesystem::path worker_executable;  // for placement: process
  std::filesystem::path ipc_dir;            // for placement: process: the engine's private ipc folder
  std::string log_level = "warn";
  std::chrono::seconds worker_start_timeout{120};
  const ModelRegistry* registry = nullptr;   // must outlive the coordinator
  const PolicyRegistry* policies = nullptr;  // must outlive the coordinator; has topology.scheduler.policy
};

constexpr uint32_t kCoordinatorOk = UINT32_MAX;

caf::actor spawn_coordinator(caf::actor_system& system, CoordinatorParams params);

}  // namespace actord
