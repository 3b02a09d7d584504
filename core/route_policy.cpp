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

}  // namespace actord
