#include "core/route_policy.hpp"

namespace actord {

Result<RoutePolicy> route_policy_from_name(const std::string& name) {
  if (name == "round_robin") return RoutePolicy::round_robin;
  if (name == "least_tokens") return RoutePolicy::least_tokens;
  if (name == "prefix_affinity") return RoutePolicy::prefix_affinity;
  return Error{Errc::invalid_config, "must be round_robin, least_tokens or prefix_affinity, got '" + name + "'"};
}

const char* route_policy_name(RoutePolicy policy) {
  switch (policy) {
    case RoutePolicy::round_robin: return "round_robin";
    case RoutePolicy::least_tokens: return "least_tokens";
    case RoutePolicy::prefix_affinity: return "prefix_affinity";
  }
  return "?";
}

Result<ReplicaRole> replica_role_from_name(const std::string& name) {
  if (name == "both") return ReplicaRole::both;
  if (name == "prefill") return ReplicaRole::prefill;
  if (name == "decode") return ReplicaRole::decode;
  return Error{Errc::invalid_config, "must be both, prefill or decode, got '" + name + "'"};
}

const char* replica_role_name(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::both: return "both";
    case ReplicaRole::prefill: return "prefill";
    case ReplicaRole::decode: return "decode";
  }
  return "?";
}

}  // namespace actord
