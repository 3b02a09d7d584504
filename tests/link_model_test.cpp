// The link model of a collective group (GroupSpec::link_latency, link_bytes_per_second; groups[].link): every
// operation returns latency + its bytes / bandwidth after the last rank arrived, results unchanged; a send costs
// its sender nothing and its receive pays. In-process ranks (threads) and ranks in processes over shared memory.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "comms/collectives/group_factory.hpp"
#include "test_util.hpp"

using namespace actord;
using namespace actord::coll;

namespace {

constexpr auto kLatency = std::chrono::milliseconds(3);
constexpr uint64_t kBytesPerSecond = 100'000'000;  // 100 MB/s: 1 MB takes 10 ms

GroupSpec linked_spec(uint64_t id) {
  GroupSpec spec;
  spec.name = "link";
  spec.id = id;
  spec.size = 2;
  spec.link_latency = kLatency;
  spec.link_bytes_per_second = kBytesPerSecond;
  return spec;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Rank 1 of `spec` in a child process: a barrier, then `late` later a 1 MB all_reduce of 2s (which must give 3s);
// exits 0 when both went well.
pid_t fork_rank_1(const GroupSpec& spec, std::chrono::milliseconds late) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    auto comm = join_group(spec, 1);
    if (!comm) _exit(2);
    std::vector<float> data(250'000, 2.0f);
    bool ok = (*comm)->barrier().ok();
    std::this_thread::sleep_for(late);
    ok = ok && (*comm)->all_reduce(data).ok() && data[0] == 3.0f;
    comm->reset();
    _exit(ok ? 0 : 1);
  }
  return child;
}

}  // namespace

TEST_CASE("link model: operations take latency + bytes / bandwidth longer and give the same results", "[collectives][link_model]") {
  auto comms = create_local_group(linked_spec(1));
  REQUIRE(comms.ok());
  struct Timing {
    double all_reduce = 0, barrier = 0, all_to_all = 0, send = 0, recv = 0;
    std::chrono::steady_clock::time_point done;  // when its send or recv returned
    std::vector<float> sum;
  };
  std::vector<Timing> t(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      Communicator& c = *(*comms)[size_t(r)];
      std::vector<float> data(250'000, float(r + 1));  // 1 MB: a ring all-reduce of 2 ranks moves 1 MB per rank
      auto t0 = std::chrono::steady_clock::now();
      REQUIRE(c.all_reduce(data).ok());
      t[size_t(r)].all_reduce = ms_since(t0);
      t[size_t(r)].sum = {data.front(), data.back()};
      t0 = std::chrono::steady_clock::now();
      REQUIRE(c.barrier().ok());
      t[size_t(r)].barrier = ms_since(t0);
      // all_to_all: 0.5 MB to the other rank, 0.25 MB to itself (which does not travel).
      std::vector<float> in(187'500, 1.0f), out;
      std::vector<size_t> counts = {r == 0 ? 62'500u : 125'000u, r == 0 ? 125'000u : 62'500u}, received;
      t0 = std::chrono::steady_clock::now();
      REQUIRE(c.all_to_all(in, counts, out, received).ok());
      t[size_t(r)].all_to_all = ms_since(t0);
      // 2 MB from rank 0 to rank 1: 20 ms on the link, more than a loaded machine delays the sender's thread.
      std::vector<float> message(500'000, 7.0f);
      REQUIRE(c.barrier().ok());
      t0 = std::chrono::steady_clock::now();
      if (r == 0) {
        REQUIRE(c.send(1, message).ok());
        t[0].send = ms_since(t0);
        t[0].done = std::chrono::steady_clock::now();
      } else {
        REQUIRE(c.recv(0, message).ok());
        t[1].recv = ms_since(t0);
        t[1].done = std::chrono::steady_clock::now();
      }
    });
  }
  for (auto& th : ranks) th.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": all_reduce " << t[size_t(r)].all_reduce << " ms, barrier " << t[size_t(r)].barrier
                 << " ms, all_to_all " << t[size_t(r)].all_to_all << " ms");
    CHECK(t[size_t(r)].sum == std::vector<float>{3.0f, 3.0f});
    // Upper bounds only catch a link that waits far too long: the time counts from the later rank's arrival, and
    // on a loaded machine either rank's thread may start tens of ms late after the barrier.
    CHECK(t[size_t(r)].all_reduce >= 3.0 + 10.0);
    CHECK(t[size_t(r)].all_reduce < 13.0 + 250.0);
    CHECK(t[size_t(r)].barrier >= 3.0);
    CHECK(t[size_t(r)].barrier < 3.0 + 250.0);
    CHECK(t[size_t(r)].all_to_all >= 3.0 + 5.0);
  }
  INFO("send " << t[0].send << " ms, recv " << t[1].recv << " ms");
  CHECK(t[1].recv >= 3.0 + 20.0);
  // The sender does not pay for the link: it returns once the receiver took the bytes, which then waits out the
  // modelled time (compared as instants: on a busy machine either thread may start late after the barrier).
  CHECK(t[0].done < t[1].done);
}

TEST_CASE("link model: a rank that arrives late delays every rank by the link's time after its arrival - threads and "
          "processes", "[collectives][link_model]") {
  constexpr auto kLate = std::chrono::milliseconds(30);
  // Threads: rank 1 calls 30 ms after rank 0; both return 3 + 10 ms after rank 1's call, not at it.
  {
    auto comms = create_local_group(linked_spec(3));
    REQUIRE(comms.ok());
    std::vector<double> took(2);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        if (r == 1) std::this_thread::sleep_for(kLate);
        std::vector<float> data(250'000, float(r + 1));
        REQUIRE((*comms)[size_t(r)]->all_reduce(data).ok());
        took[size_t(r)] = ms_since(t0);
      });
    }
    for (auto& th : ranks) th.join();
    INFO("threads: rank 0 returned after " << took[0] << " ms, rank 1 after " << took[1] << " ms");
    CHECK(took[0] >= 30.0 + 13.0);
    CHECK(took[1] >= 30.0 + 13.0);
  }
  // Processes over shared memory: the child arrives 30 ms after the barrier.
  GroupSpec spec = linked_spec(4);
  spec.placement = Placement::process;
  spec.engine_pid = getpid();
  const pid_t child = fork_rank_1(spec, kLate);
  auto comm = join_group(spec, 0);
  REQUIRE(comm.ok());
  REQUIRE((*comm)->barrier().ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> data(250'000, 1.0f);
  REQUIRE((*comm)->all_reduce(data).ok());
  const double took = ms_since(t0);
  comm->reset();
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  INFO("processes: rank 0 returned after " << took << " ms");
  // The barrier's own 3 ms latency may let the child start its sleep up to a few ms before rank 0's clock starts.
  CHECK(took >= 30.0 + 13.0 - 5.0);
}

TEST_CASE("link model: the same over shared memory between processes, and no model costs nothing", "[collectives][link_model]") {
  // Two processes: rank 1 is a child; each times a barrier and a 1 MB all_reduce.
  test::TempDir tmp;
  GroupSpec spec = linked_spec(2);
  spec.placement = Placement::process;
  spec.engine_pid = getpid();
  const pid_t child = fork_rank_1(spec, std::chrono::milliseconds(0));
  auto comm = join_group(spec, 0);
  REQUIRE(comm.ok());
  std::vector<float> data(250'000, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE((*comm)->barrier().ok());
  const double barrier = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  REQUIRE((*comm)->all_reduce(data).ok());
  const double all_reduce = ms_since(t0);
  comm->reset();
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(data[0] == 3.0f);
  CHECK(barrier >= 3.0);
  CHECK(all_reduce >= 13.0);
  // Without a model a barrier between threads takes microseconds, not the latency.
  GroupSpec plain;
  plain.name = "plain";
  plain.id = 3;
  plain.size = 2;
  auto threads = create_local_group(plain);
  REQUIRE(threads.ok());
  double fastest = 1e9;
  std::thread other([&] {
    for (int i = 0; i < 5; ++i) REQUIRE((*threads)[1]->barrier().ok());
  });
  for (int i = 0; i < 5; ++i) {
    t0 = std::chrono::steady_clock::now();
    REQUIRE((*threads)[0]->barrier().ok());
    fastest = std::min(fastest, ms_since(t0));
  }
  other.join();
  CHECK(fastest < 1.0);
}
