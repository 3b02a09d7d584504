#include "comms/collectives/group_spec.hpp"

#include <algorithm>
#include <random>

namespace actord::coll {
namespace {

constexpr int kMaxRanks = 4096;             // zmq frames carry the rank in 16 bits; far beyond any real group
constexpr int kMaxSharedMemoryRanks = 256;  // the segment holds a channel per ordered pair of ranks
constexpr size_t kMaxSocketPath = 107;      // sun_path of a Unix socket, without its terminating NUL

Error spec_error(const GroupSpec& spec, const std::string& what) {
  return make_error(Errc::invalid_argument, describe(spec) + ": " + what);
}

bool wildcard_port(const std::string& endpoint) {
  return endpoint.size() >= 2 && endpoint.compare(endpoint.size() - 2, 2, ":*") == 0;
}

}  // namespace

const char* placement_name(Placement placement) {
  switch (placement) {
    case Placement::thread: return "thread";
    case Placement::process: return "process";
    case Placement::node: return "node";
  }
  return "unknown";
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::automatic: return "automatic";
    case Backend::in_process: return "in_process";
    case Backend::shared_memory: return "shared_memory";
    case Backend::zmq: return "zmq";
    case Backend::nccl: return "nccl";
  }
  return "unknown";
}

Backend resolve_backend(const GroupSpec& spec) {
  if (spec.backend != Backend::automatic) return spec.backend;
  switch (spec.placement) {
    case Placement::thread: return Backend::in_process;
    case Placement::process: return Backend::shared_memory;
    case Placement::node: return Backend::zmq;
  }
  return Backend::in_process;
}

std::string describe(const GroupSpec& spec) {
  return "collective group '" + spec.name + "' (id " + std::to_string(spec.id) + ")";
}

Status validate(const GroupSpec& spec) {
  if (spec.size < 1 || spec.size > kMaxRanks) {
    return spec_error(spec,
                      "size: must be in [1, " + std::to_string(kMaxRanks) + "], got " + std::to_string(spec.size));
  }
  if (spec.timeout.count() <= 0) {
    return spec_error(spec, "timeout: must be positive, got " + std::to_string(spec.timeout.count()) + " ms");
  }
  const Backend backend = resolve_backend(spec);
  if (backend == Backend::in_process && spec.placement != Placement::thread) {
    return spec_error(spec,
                      std::string("backend: in_process needs placement thread, got ") + placement_name(spec.placement));
  }
  if (backend == Backend::shared_memory) {
    if (spec.placement == Placement::node) {
      return spec_error(spec, "backend: shared_memory reaches only the processes of one node, placement is node");
    }
    if (spec.size > kMaxSharedMemoryRanks) {
      return spec_error(spec, "size: at most " + std::to_string(kMaxSharedMemoryRanks) +
                                  " ranks share a memory segment, got " + std::to_string(spec.size));
    }
    if (spec.engine_pid <= 0) {
      return spec_error(spec, "engine_pid: the shared memory segment is named after the engine's pid, got " +
                                  std::to_string(spec.engine_pid));
    }
    // Every rank's share of a piece is at least 16 floats (one cache line).
    const size_t min_slot = std::max<size_t>(4096, size_t{64} * static_cast<size_t>(spec.size));
    if (spec.slot_bytes < min_slot || spec.slot_bytes > (size_t{1} << 30)) {
      return spec_error(spec, "slot_bytes: must be in [" + std::to_string(min_slot) + ", 1 GiB], got " +
                                  std::to_string(spec.slot_bytes));
    }
    if (spec.channel_bytes < 4096 || spec.channel_bytes > (size_t{1} << 30)) {
      return spec_error(spec, "channel_bytes: must be in [4096, 1 GiB], got " + std::to_string(spec.channel_bytes));
    }
  }
  if (backend == Backend::zmq) {
    if (spec.endpoints.size() != static_cast<size_t>(spec.size)) {
      return spec_error(spec, "endpoints: " + std::to_string(spec.endpoints.size()) + " entries for " +
                                  std::to_string(spec.size) + " ranks");
    }
    for (size_t r = 0; r < spec.endpoints.size(); ++r) {
      const std::string& e = spec.endpoints[r];
      const std::string key = "endpoints[" + std::to_string(r) + "]";
      if (e.rfind("tcp://", 0) != 0 && e.rfind("ipc://", 0) != 0) {
        return spec_error(spec, key + ": must start with tcp:// or ipc://, got '" + e + "'");
      }
      if (e.rfind("ipc://", 0) == 0 && e.size() - 6 > kMaxSocketPath) {
        return spec_error(spec, key + ": a socket path has at most " + std::to_string(kMaxSocketPath) + " bytes, got " +
                                    std::to_string(e.size() - 6));
      }
      if (r == 0 && spec.size > 1 && wildcard_port(e)) {
        return spec_error(spec, key + ": rank 0's port must be given (the other ranks connect to it), got '" + e + "'");
      }
    }
    if (spec.piece_bytes < 4096 || spec.piece_bytes > (size_t{1} << 30)) {
      return spec_error(spec, "piece_bytes: must be in [4096, 1 GiB], got " + std::to_string(spec.piece_bytes));
    }
  }
  return Status::success();
}

std::vector<std::string> ipc_endpoints(const std::filesystem::path& folder, uint64_t id, int size) {
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) {
    out.push_back("ipc://" + (folder / ("coll-" + std::to_string(id) + "-" + std::to_string(r))).string());
  }
  return out;
}

uint64_t first_group_id() {
  std::random_device entropy;
  const uint64_t draw = (uint64_t{entropy()} << 16) ^ entropy();  // 48 random bits
  return (draw << 4) + 1;
}

std::string shm_segment_name(const GroupSpec& spec) {
  return "/actord-coll-" + std::to_string(spec.engine_pid) + "-" + std::to_string(spec.id);
}

}  // namespace actord::coll
