// The CPUs this process may run on, binding a process to some of them, and handing them out to worker processes.
//
// Contract: usable_cpus() lists the CPUs of this process's affinity mask (sched_getaffinity: what taskset, cpusets
// and container runtimes give it), ascending; usable_cpu_cores() counts them, falling back to
// std::thread::hardware_concurrency(); at least 1. CPU quotas (cgroup cpu.max) are not counted: they limit time, not
// the cores a thread may run on. bind_process_to_cpus() sets the affinity of every thread of this process (threads
// it starts later inherit it from their creator); a CPU outside usable_cpus() is refused by name and nothing
// changes. CpuAllocator is pure bookkeeping over a list of CPU ids (no system calls): disjoint sets, the lowest free
// ids first (Linux numbers a core's hyperthread siblings apart, so the lowest ids are distinct cores first).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace actord {

unsigned usable_cpu_cores();
std::vector<int> usable_cpus();
Status bind_process_to_cpus(std::span<const int> cpus);
// "0-3,8,10-11"
std::string cpu_list_text(std::span<const int> cpus);

class CpuAllocator {
 public:
  CpuAllocator() = default;
  explicit CpuAllocator(std::vector<int> cpus);
  // `count` free CPUs (the lowest ids), now taken; empty when fewer than `count` are free or count < 1.
  std::vector<int> take(int count);
  // Returns CPUs taken before (ids it does not hold as taken are ignored).
  void give_back(std::span<const int> cpus);
  int free_count() const;
  int size() const { return static_cast<int>(cpus_.size()); }

 private:
  std::vector<int> cpus_;    // ascending
  std::vector<bool> taken_;  // [index in cpus_]
};

}  // namespace actord
