#include "actors/group_codec.hpp"

#include <algorithm>
#include <cstdint>

namespace actord {

void to_wire(const coll::GroupSpec& spec, wire::CollectiveGroup::Builder out) {
  out.setName(spec.name);
  out.setId(spec.id);
  out.setSize(static_cast<uint32_t>(spec.size));
  out.setBackend(coll::backend_name(coll::resolve_backend(spec)));
  out.setTimeoutMs(static_cast<uint32_t>(spec.timeout.count()));
  out.setEnginePid(spec.engine_pid);
  auto endpoints = out.initEndpoints(static_cast<uint32_t>(spec.endpoints.size()));
  for (uint32_t i = 0; i < spec.endpoints.size(); ++i) endpoints.set(i, spec.endpoints[i]);
  out.setOverNccl(spec.over_nccl);
  out.setLinkLatencyNs(static_cast<uint64_t>(spec.link_latency.count()));
  out.setLinkBytesPerSecond(spec.link_bytes_per_second);
}

Result<coll::GroupSpec> from_wire(wire::CollectiveGroup::Reader in) {
  coll::GroupSpec spec;
  spec.name = in.getName();
  spec.id = in.getId();
  spec.size = static_cast<int>(in.getSize());
  if (spec.size == 0) return spec;
  const std::string backend = in.getBackend();
  if (backend == "in_process") {
    spec.backend = coll::Backend::in_process;
    spec.placement = coll::Placement::thread;
  } else if (backend == "shared_memory") {
    spec.backend = coll::Backend::shared_memory;
    spec.placement = coll::Placement::process;
  } else if (backend == "zmq") {
    spec.backend = coll::Backend::zmq;
    spec.placement = coll::Placement::node;
  } else {
    return make_error(Errc::invalid_argument, "collective group '" + spec.name + "': unknown backend '" + backend + "'");
  }
  spec.timeout = std::chrono::milliseconds(in.getTimeoutMs());
  spec.engine_pid = in.getEnginePid();
  for (auto e : in.getEndpoints()) spec.endpoints.emplace_back(e);
  spec.over_nccl = in.getOverNccl();
  spec.link_latency = std::chrono::nanoseconds(static_cast<int64_t>(std::min<uint64_t>(in.getLinkLatencyNs(), INT64_MAX)));
  spec.link_bytes_per_second = in.getLinkBytesPerSecond();
  return spec;
}

}  // namespace actord
