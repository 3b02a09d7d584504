#include "scheduler/policy_registry.hpp"

namespace actord {

PolicyRegistry PolicyRegistry::with_builtins() {
  PolicyRegistry r;
  r.add("fcfs", make_fcfs_policy);
  r.add("priority", make_priority_policy);
  return r;
}

void PolicyRegistry::add(const std::string& name, Factory factory) { factories_[name] = std::move(factory); }

Result<std::unique_ptr<SchedulingPolicy>> PolicyRegistry::create(const std::string& name) const {
  ACTORD_TRY_STATUS(check(name));
  auto policy = factories_.at(name)();
  if (!policy) return make_error(Errc::internal, "scheduler.policy: the factory of '" + name + "' returned nothing");
  return policy;
}

Status PolicyRegistry::check(const std::string& name) const {
  if (contains(name)) return {};
  return make_error(Errc::invalid_config, "scheduler.policy: unknown policy '" + name + "' (known: " + known() + ")");
}

std::string PolicyRegistry::known() const {
  std::string out;
  for (const auto& [name, factory] : factories_) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace actord
