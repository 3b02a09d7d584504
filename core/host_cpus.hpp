// How many CPU cores this process may run on.
//
// Contract: usable_cpu_cores() counts the CPUs of this process's affinity mask (sched_getaffinity: what taskset,
// cpusets and container runtimes give it), falling back to std::thread::hardware_concurrency(); at least 1.
// CPU quotas (cgroup cpu.max) are not counted: they limit time, not the cores a thread may run on.
#pragma once

namespace actord {

unsigned usable_cpu_cores();

}  // namespace actord
