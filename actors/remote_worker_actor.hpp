// A worker in another process, seen as a worker actor: same messages as worker_actor.hpp ((init_atom, WorkerInit)
// -> WorkerReady; (step_atom, ExecuteStep) -> StepResult), forwarded over its link (worker_process.hpp) to `actord worker`.
//
// Contract: replies come back in request order. If the process dies, every pending and later request is answered
// with an Error (kind worker_failed) naming the process and how it ended; the actor keeps running so its clients
// get answers, and the process is reaped when the actor terminates.
#pragma once

#include <caf/fwd.hpp>

#include "actors/worker_interface.hpp"
#include "actors/worker_process_options.hpp"

namespace actord {

worker_actor spawn_remote_worker(caf::actor_system& system, const WorkerProcessOptions& options);

}  // namespace actord
