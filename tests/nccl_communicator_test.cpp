// The NCCL backend of the collectives (comms/nccl/): ranks in fresh processes (this test binary executed again, running
// the hidden test case "[.nccl_rank]": CUDA does not survive a fork of a process that used it, as earlier [cuda] tests
// in this one did), one GPU each (as many ranks as the machine has GPUs, at most 4; a group of one on a single GPU),
// bootstrapped over a shared memory group. Device
// memory through NCCL against sums computed here; host memory through the bootstrap group. Tagged [cuda]: without
// a usable GPU (CI) it says why and passes without checking anything else. Without CUDA in the build, joining is an
// Error naming why (checked everywhere).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comms/collectives/group_factory.hpp"
#include "comms/nccl/nccl_communicator.hpp"
#include "executors/cuda/cuda_backend.hpp"

using namespace actord;
using namespace std::chrono_literals;

namespace {

float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)) * 0.25f; }

// What rank `rank` of `size` checks; 0 when everything matched, else the number of the failed check.
int run_rank(int rank, int size, uint64_t id, pid_t engine) {
  auto backend = cuda::make_backend(rank);
  if (!backend) return 1;
  exec::Backend& be = **backend;
  coll::GroupSpec spec;
  spec.name = "test/nccl";
  spec.id = id;
  spec.size = size;
  spec.placement = coll::Placement::process;
  spec.timeout = 20s;
  spec.engine_pid = engine;
  auto bootstrap = coll::join_group(spec, rank);
  if (!bootstrap) return 2;
  auto comm = coll::join_nccl_group(std::move(*bootstrap), cuda::device_of(be), cuda::stream_of(be));
  if (!comm) return 3;
  constexpr size_t n = 10007;
  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = value(rank, i);
  // all_reduce of device memory: every value is a multiple of 0.25 below 2^20, so any order sums exactly.
  exec::Buffer data = be.upload(mine);
  if (!(*comm)->all_reduce(data.first(n))) return 4;
  std::vector<float> got(n);
  be.download(data, 0, got);
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < size; ++r) want += value(r, i);
    if (got[i] != want) return 5;
  }
  // all_gather of uneven parts (rank r gives r + 3 values).
  std::vector<size_t> counts;
  size_t total = 0;
  for (int r = 0; r < size; ++r) total += counts.emplace_back(size_t(r) + 3);
  exec::Buffer part = be.upload(std::vector<float>(mine.begin(), mine.begin() + long(counts[size_t(rank)])));
  exec::Buffer all;
  be.reserve(all, total);
  if (!(*comm)->all_gather(part.first(counts[size_t(rank)]), all.first(total), counts)) return 6;
  std::vector<float> gathered(total);
  be.download(all, 0, gathered);
  for (int r = 0, at = 0; r < size; ++r)
    for (size_t i = 0; i < counts[size_t(r)]; ++i, ++at)
      if (gathered[size_t(at)] != value(r, i)) return 7;
  // Host memory goes through the bootstrap group: the same all_reduce on a host vector.
  std::vector<float> host = mine;
  if (!(*comm)->all_reduce(host)) return 8;
  if (host != got) return 9;
  // send / recv of device memory around the ring.
  if (size > 1) {
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    exec::Buffer in;
    be.reserve(in, n);
    if (rank == 0) {
      if (!(*comm)->send(next, data.first(n)) || !(*comm)->recv(prev, in.first(n))) return 10;
    } else {
      if (!(*comm)->recv(prev, in.first(n)) || !(*comm)->send(next, data.first(n))) return 11;
    }
  }
  return (*comm)->barrier() ? 0 : 12;
}

}  // namespace

TEST_CASE("nccl: device memory through NCCL, host memory through the bootstrap group, across processes",
          "[cuda][nccl]") {
  if (!cuda::built_with_cuda()) {
    auto refused = coll::join_nccl_group(nullptr, 0, nullptr);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == Errc::unsupported);
    return;
  }
  const int gpus = cuda::device_count();
  if (gpus == 0) {
    WARN("skipped: " << cuda::unavailable_reason());
    return;
  }
  const int size = std::min(gpus, 4);
  std::vector<pid_t> ranks;
  for (int r = 0; r < size; ++r) {
    // Set here, inherited by the child, which only executes (nothing that allocates between fork and exec).
    const std::string rank = std::to_string(r) + " " + std::to_string(size) + " 4242 " + std::to_string(getpid());
    setenv("ACTORD_NCCL_TEST_RANK", rank.c_str(), 1);
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", "actord_tests", "[.nccl_rank]", static_cast<char*>(nullptr));
      _exit(100);
    }
    ranks.push_back(pid);
  }
  unsetenv("ACTORD_NCCL_TEST_RANK");
  for (int r = 0; r < size; ++r) {
    int status = 0;
    waitpid(ranks[size_t(r)], &status, 0);
    INFO("rank " << r << " of " << size);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

// One rank of the test above, in a process of its own: ACTORD_NCCL_TEST_RANK = "rank size id engine-pid".
TEST_CASE("nccl: one rank of the across-processes test", "[.nccl_rank]") {
  const char* spec = std::getenv("ACTORD_NCCL_TEST_RANK");
  if (!spec) return;
  int rank = 0, size = 0;
  unsigned long long id = 0;
  long engine = 0;
  REQUIRE(std::sscanf(spec, "%d %d %llu %ld", &rank, &size, &id, &engine) == 4);
  _exit(run_rank(rank, size, id, static_cast<pid_t>(engine)));
}
