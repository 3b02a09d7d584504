// The worker's typed interface: what a scheduler and the coordinator may ask of a rank, whether it runs as a thread
// of the engine (worker_actor.hpp) or in a process of its own behind a proxy (remote_worker_actor.hpp). Each request
// is a capnp struct in a wire_msg and each reply one too; a reply carries an Error in its `error` field instead of
// a sentinel: init_atom (WorkerInit -> WorkerReady), step_atom (ExecuteStep -> StepResult), export_kv_atom (ExportKv
// -> KvExport, the KV bytes as bulk), import_kv_atom (ImportKv with the bytes -> KvImported). A follower rank of a
// tensor/pipeline parallel replica gets step_atom without a reply (anon_send).
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "comms/atoms.hpp"
#include "comms/wire_msg.hpp"

namespace actord {

using worker_actor = caf::typed_actor<caf::replies_to<init_atom, wire_msg>::with<wire_msg>,
                                      caf::replies_to<step_atom, wire_msg>::with<wire_msg>,
                                      caf::replies_to<export_kv_atom, wire_msg>::with<wire_msg>,
                                      caf::replies_to<import_kv_atom, wire_msg>::with<wire_msg>>;

}  // namespace actord
