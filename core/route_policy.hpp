// How the router picks a replica (groups[].router, and groups[].role for prefill/decode disaggregation;
// scheduler/replica_router.hpp applies both).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.hpp"

namespace actord {

enum class RoutePolicy { round_robin, least_tokens, prefix_affinity };

// "round_robin" | "least_tokens" | "prefix_affinity"; anything else is an invalid_config error saying so.
Result<RoutePolicy> route_policy_from_name(const std::string& name);
const char* route_policy_name(RoutePolicy policy);

// What a group's replicas do in prefill/decode disaggregation (groups[].role): both (a request prefills and decodes
// where it was routed), prefill (new requests come here; once a sequence's prompt is computed and its first token
// sampled, it moves on with its KV to a replica that decodes), decode (takes the sequences prefilled elsewhere).
// Every replica can do either: a phase with no replica of its role goes to the others.
enum class ReplicaRole : uint8_t { both, prefill, decode };

// "both" | "prefill" | "decode"; anything else is an invalid_config error saying so.
Result<ReplicaRole> replica_role_from_name(const std::string& name);
const char* replica_role_name(ReplicaRole role);

// Whether replicas of `role` serve requests in their prefill (resp. decode) phase.
inline bool serves_prefill(ReplicaRole role) { return role != ReplicaRole::decode; }
inline bool serves_decode(ReplicaRole role) { return role != ReplicaRole::prefill; }

// The policy the router applies to requests in each phase: that of the groups serving the phase (several groups
// serving one phase name one policy; core/topology_config checks it). Colocated groups: one policy for both.
struct PhasePolicies {
  RoutePolicy prefill = RoutePolicy::least_tokens;
  RoutePolicy decode = RoutePolicy::least_tokens;
  bool operator==(const PhasePolicies&) const = default;
};

}  // namespace actord
