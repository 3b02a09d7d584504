// Scheduling policies by name: the built-in ones and those out-of-tree plugins add (plugins/plugin_api.hpp).
//
// Contract: filled before an engine starts (plugins load then), read-only afterwards; create() errors name the
// policy and list the known ones. Not thread-safe while being filled.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/status.hpp"
#include "scheduler/scheduling_policy.hpp"

namespace actord {

class PolicyRegistry {
 public:
  using Factory = std::function<std::unique_ptr<SchedulingPolicy>()>;

  static PolicyRegistry with_builtins();  // fcfs, priority

  void add(const std::string& name, Factory factory);  // replaces a policy of the same name
  bool contains(const std::string& name) const { return factories_.count(name) > 0; }
  // The error create() gives for an unknown name: "scheduler.policy: unknown policy 'x' (known: ...)".
  Status check(const std::string& name) const;
  Result<std::unique_ptr<SchedulingPolicy>> create(const std::string& name) const;
  std::string known() const;  // "fcfs, priority, ..."

 private:
  std::map<std::string, Factory> factories_;
};

}  // namespace actord
