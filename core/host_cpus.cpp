#include "core/host_cpus.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace actord {

std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

unsigned usable_cpu_cores() {
  const size_t count = usable_cpus().size();
  if (count > 0) return static_cast<unsigned>(count);
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string cpu_list_text(std::span<const int> cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

Status bind_process_to_cpus(std::span<const int> cpus) {
  if (cpus.empty()) return make_error(Errc::invalid_argument, "no CPUs to bind to");
  const std::vector<int> usable = usable_cpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (!std::binary_search(usable.begin(), usable.end(), cpu))
      return make_error(Errc::invalid_argument, "CPU " + std::to_string(cpu) + " is not one this process may use (" +
                                                    cpu_list_text(usable) + ")");
    CPU_SET(cpu, &set);
  }
  // Every thread there is now (/proc/self/task); threads started later inherit their creator's mask.
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return make_error(Errc::internal, std::string("/proc/self/task: ") + std::strerror(errno));
  Status status;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const pid_t tid = static_cast<pid_t>(std::atoi(entry->d_name));
    // A thread that ended meanwhile (ESRCH) needs no binding.
    if (sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH && status.ok())
      status = make_error(Errc::internal, "sched_setaffinity(thread " + std::to_string(tid) + ", CPUs " +
                                              cpu_list_text(cpus) + "): " + std::strerror(errno));
  }
  closedir(tasks);
  return status;
}

CpuAllocator::CpuAllocator(std::vector<int> cpus) : cpus_(std::move(cpus)) {
  std::sort(cpus_.begin(), cpus_.end());
  cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
  taken_.assign(cpus_.size(), false);
}

std::vector<int> CpuAllocator::take(int count) {
  if (count < 1 || free_count() < count) return {};
  std::vector<int> out;
  for (size_t i = 0; i < cpus_.size() && static_cast<int>(out.size()) < count; ++i) {
    if (taken_[i]) continue;
    taken_[i] = true;
    out.push_back(cpus_[i]);
  }
  return out;
}

void CpuAllocator::give_back(std::span<const int> cpus) {
  for (const int cpu : cpus) {
    const auto it = std::lower_bound(cpus_.begin(), cpus_.end(), cpu);
    if (it != cpus_.end() && *it == cpu) taken_[static_cast<size_t>(it - cpus_.begin())] = false;
  }
}

int CpuAllocator::free_count() const {
  return static_cast<int>(std::count(taken_.begin(), taken_.end(), false));
}

}  // namespace actord
