// What a collective group is: its name and generation, its size, where its ranks live and so which backend
// connects them, and the few sizes and addresses the backends need.
//
// Contract: a GroupSpec is plain data, the same on every rank of the group (the coordinator makes it and hands it
// to each rank). `id` tells generations apart: a group that is torn down and created again (resized, or rebuilt
// after a failure) takes a new id, so nothing of the old generation (a shared memory segment, a late message) can
// be mistaken for the new one. validate() names the field and the rule of the first problem it finds.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace actord::coll {

// Where the ranks of a group live.
enum class Placement {
  thread,   // threads of one process
  process,  // processes of one node
  node,     // processes on several nodes
};

enum class Backend {
  automatic,      // from the placement: thread -> in_process, process -> shared_memory, node -> zmq
  in_process,     // shared buffers and a barrier between threads
  shared_memory,  // a POSIX shared memory segment between processes of one node
  zmq,            // ZeroMQ sockets (tcp:// between nodes, also ipc:// or tcp:// loopback on one node)
  nccl,           // NCCL between CUDA ranks, over a group of one of the above (comms/nccl/; never from a placement)
};

const char* placement_name(Placement placement);
const char* backend_name(Backend backend);

struct GroupSpec {
  std::string name;  // stable name for errors, e.g. "replica/0/tp"
  uint64_t id = 0;   // unique per generation of a group within its engine
  int size = 1;      // ranks 0 .. size-1
  Placement placement = Placement::thread;
  Backend backend = Backend::automatic;
  // The longest any operation (and joining the group) waits for a peer; past it the operation returns an Error.
  std::chrono::milliseconds timeout{10000};

  // shared_memory: the segment is /actord-coll-<engine_pid>-<id> (the engine is the process that owns the group's
  // ranks; a segment whose engine is gone is removed by the next group made on that machine).
  int64_t engine_pid = 0;
  size_t slot_bytes = size_t{1} << 20;  // staging buffer per rank (twice: double-buffered); larger ops go in pieces
  size_t channel_bytes = size_t{256} << 10;  // ring buffer per ordered pair of ranks, for send/recv

  // zmq: endpoints[r] is the address rank r binds. Rank 0's must be concrete (the others find it there); the others
  // may leave the port to the system ("tcp://10.0.0.2:*") and announce the one they got through rank 0.
  std::vector<std::string> endpoints;
  size_t piece_bytes = size_t{1} << 20;  // large transfers go as frames of at most this size

  // CUDA ranks: this group (of the backend above) only bootstraps an NCCL communicator that carries device memory
  // (comms/nccl/); each rank joins it once its GPU is set up.
  bool over_nccl = false;

  // A link model for research runs (groups[].link): no operation completes earlier than link_latency + the bytes
  // this rank puts on its link / link_bytes_per_second after the last rank arrived at it (after it started where
  // the backend cannot tell; the rest slept: the CPU is free meanwhile; the backend's own time counts toward it); a send costs its sender nothing, its receive pays for it.
  // Zero: none.
  std::chrono::nanoseconds link_latency{0};
  uint64_t link_bytes_per_second = 0;
};

// The backend `spec` runs on (backend, or the placement's when automatic).
Backend resolve_backend(const GroupSpec& spec);

// Checks spec for the backend it resolves to: "collective group 'tp' (id 3): endpoints: 2 entries for 3 ranks".
Status validate(const GroupSpec& spec);

// "collective group 'NAME' (id ID)": how errors name a group.
std::string describe(const GroupSpec& spec);

// One ipc:// endpoint per rank in `folder` (a private folder of the caller's):
// "ipc://<folder>/coll-<id>-<rank>".
std::vector<std::string> ipc_endpoints(const std::filesystem::path& folder, uint64_t id, int size);

// The name of the shared memory segment of a group ("/actord-coll-<engine_pid>-<id>").
std::string shm_segment_name(const GroupSpec& spec);

// A random first id for the groups one engine makes (ids then count up from it): several engines of one process
// (started one after another, as tests do) never name the same segment, even where an earlier engine's killed
// ranks have not unlinked theirs yet. Below 2^53, so that JSON readers keep it exact.
uint64_t first_group_id();

}  // namespace actord::coll
