// engine.cpu_binding: the CPU allocator's bookkeeping, and worker processes bound (every thread) to CPUs of their own,
// given back when a replica stops and taken again by the replica rebuilt after a rank is killed.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <set>

#include "core/host_cpus.hpp"
#include "parallel_test_util.hpp"

using namespace actord;
using namespace actord::test;

namespace {

// The CPUs in a /proc status file's Cpus_allowed_list ("0-3,8").
std::vector<int> allowed_cpus(const std::filesystem::path& status) {
  std::ifstream in(status);
  std::string line;
  std::vector<int> out;
  while (std::getline(in, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
    std::stringstream list(line.substr(line.find(':') + 1));
    std::string part;
    while (std::getline(list, part, ',')) {
      const size_t dash = part.find('-');
      const int first = std::stoi(part.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
      for (int cpu = first; cpu <= last; ++cpu) out.push_back(cpu);
    }
  }
  return out;
}

// Every thread's CPUs of process `pid`, the same for all of them (else the test fails).
std::vector<int> process_cpus(pid_t pid) {
  const std::filesystem::path proc = "/proc/" + std::to_string(pid);
  const std::vector<int> whole = allowed_cpus(proc / "status");
  for (const auto& task : std::filesystem::directory_iterator(proc / "task")) {
    INFO("thread " << task.path().filename().string() << " of worker " << pid);
    CHECK(allowed_cpus(task.path() / "status") == whole);
  }
  return whole;
}

// The CPUs of each worker process of this engine.
std::vector<std::vector<int>> worker_cpus() {
  std::vector<std::vector<int>> out;
  for (const pid_t pid : worker_processes_of(getpid())) out.push_back(process_cpus(pid));
  return out;
}

// Whether this process may use two CPUs or more (the tests below bind two ranks apart); says so when not.
bool two_cpus_or_skip(const std::vector<int>& mine) {
  if (mine.size() >= 2) return true;
  WARN("skipped: this process may use " << mine.size() << " CPU");
  return false;
}

TopologyConfig tp2_processes(const std::string& binding, int threads) {
  return quickstart("configs/tp2.yaml", {"engine.cpu_binding=" + binding, "groups[0].threads=" + std::to_string(threads),
                                         "groups[0].oversubscribe=true"});
}

}  // namespace

TEST_CASE("cpu allocator: disjoint sets of the lowest free CPUs - none when too few are free - given back", "[cpus]") {
  CpuAllocator cpus({6, 2, 4, 2, 8});
  CHECK(cpus.size() == 4);
  CHECK(cpus.take(2) == std::vector<int>{2, 4});
  CHECK(cpus.take(3).empty());  // two are free
  CHECK(cpus.take(0).empty());
  CHECK(cpus.take(-1).empty());
  CHECK(cpus.free_count() == 2);
  CHECK(cpus.take(1) == std::vector<int>{6});
  cpus.give_back(std::vector<int>{2, 99});  // 99 was never its own
  CHECK(cpus.free_count() == 2);
  CHECK(cpus.take(2) == std::vector<int>{2, 8});
  cpus.give_back(std::vector<int>{2, 4, 6, 8});
  cpus.give_back(std::vector<int>{2});  // twice: no effect
  CHECK(cpus.free_count() == 4);
  CHECK(CpuAllocator().take(1).empty());
}

TEST_CASE("cpu list text and binding refusals", "[cpus]") {
  CHECK(cpu_list_text(std::vector<int>{0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(cpu_list_text(std::vector<int>{5}) == "5");
  CHECK(cpu_list_text(std::vector<int>{}).empty());
  CHECK_FALSE(bind_process_to_cpus(std::vector<int>{}).ok());
  const Status outside = bind_process_to_cpus(std::vector<int>{CPU_SETSIZE - 1});
  const std::vector<int> mine = usable_cpus();
  if (!std::binary_search(mine.begin(), mine.end(), CPU_SETSIZE - 1)) {
    REQUIRE_FALSE(outside.ok());
    CHECK_THAT(outside.error().message, Catch::Contains("is not one this process may use"));
  }
  CHECK(mine.size() == usable_cpu_cores());
}

TEST_CASE("cpu binding: tp2 worker processes each on CPUs of their own (every thread) - none leaves them on the "
          "engine's - a rebuilt replica binds again - outputs unchanged",
          "[cpus][engine][parallel]") {
  const std::vector<int> mine = usable_cpus();
  if (!two_cpus_or_skip(mine)) return;
  const auto requests = batch(true);
  std::vector<GenerateOutput> unbound;
  {
    auto engine = start_engine(tp2_processes("none", 1));
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    unbound = *out;
    const auto cpus = worker_cpus();
    REQUIRE(cpus.size() == 2);
    for (const auto& c : cpus) CHECK(c == mine);
  }
  auto check_bound = [&](int threads) {
    const auto cpus = worker_cpus();
    REQUIRE(cpus.size() == 2);
    std::set<int> seen;
    for (const auto& c : cpus) {
      CHECK(c.size() == size_t(threads));
      for (const int cpu : c) {
        CHECK(std::binary_search(mine.begin(), mine.end(), cpu));
        CHECK(seen.insert(cpu).second);  // no CPU in two workers
      }
    }
  };
  auto engine = start_engine(tp2_processes("bind", 1));
  check_bound(1);
  auto out = engine->generate(requests);
  REQUIRE(out.ok());
  check_same(unbound, *out);
  // The replica rebuilt after a rank dies takes CPUs again: the old ones were given back.
  check_rank_kill_recovers(engine, requests, "replica/0/worker/tp1.pp0", 2);

  // auto binds when the ranks' threads are every CPU the engine may use (threads 0 shares them out).
  if (mine.size() % 2 == 0) {
    auto whole = start_engine(tp2_processes("auto", 0));
    check_bound(static_cast<int>(mine.size() / 2));
  }
}

TEST_CASE("cpu binding: auto leaves ranks unbound when their threads are not the whole machine - bind takes what "
          "is free",
          "[cpus][engine][parallel]") {
  const std::vector<int> mine = usable_cpus();
  if (!two_cpus_or_skip(mine)) return;
  // Threads beyond the CPUs: auto binds nothing; bind gives the first rank its CPUs and leaves the other unbound.
  const int threads = static_cast<int>(mine.size());  // 2 x all: oversubscribed
  {
    auto engine = start_engine(tp2_processes("auto", threads));
    for (const auto& c : worker_cpus()) CHECK(c == mine);
  }
  {
    auto engine = start_engine(tp2_processes("bind", threads - 1));
    const auto cpus = worker_cpus();
    REQUIRE(cpus.size() == 2);
    const size_t bound = size_t(std::count_if(cpus.begin(), cpus.end(), [&](const auto& c) { return c != mine; }));
    CHECK(bound == (mine.size() >= 2 * size_t(threads - 1) ? 2 : 1));
  }
}

TEST_CASE("cpu binding: a bad engine.cpu_binding is refused with its key", "[cpus][config]") {
  auto cfg = parse_topology("model: {path: m}\nengine: {cpu_binding: numa}\n", "configs/t.yaml");
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().message == "configs/t.yaml: engine.cpu_binding: must be auto, bind or none, got 'numa'");
}
