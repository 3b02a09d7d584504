// The worker actor: owns a model shard and its KV memory (through WorkerCore) and executes steps.
//
// Messages: (init_atom, WorkerInit) -> (wire_msg WorkerReady); (step_atom, ExecuteStep) -> (wire_msg StepResult).
// A malformed message gets a reply carrying an Error; the actor keeps running.
#pragma once

#include <caf/fwd.hpp>

#include "actors/rank_links.hpp"
#include "actors/worker_interface.hpp"

namespace actord {

class ModelRegistry;

// registry must outlive the actor. links: a tensor/pipeline parallel rank's communicators (none for a lone worker).
worker_actor spawn_worker(caf::actor_system& system, const ModelRegistry& registry, RankLinks links = {});

}  // namespace actord
