// How a data parallel group's router picks a replica (groups[].router; scheduler/replica_router.hpp applies it).
#pragma once

#include <string>

#include "core/status.hpp"

namespace actord {

enum class RoutePolicy { round_robin, least_tokens, prefix_affinity };

// "round_robin" | "least_tokens" | "prefix_affinity"; anything else is an invalid_config error saying so.
Result<RoutePolicy> route_policy_from_name(const std::string& name);
const char* route_policy_name(RoutePolicy policy);

}  // namespace actord
