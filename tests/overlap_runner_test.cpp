// OverlapRunner (actors/overlap_runner.hpp): micro-batches as fibers of one thread, switched only where a
// collective would wait for peers. Two ranks as threads, each with a runner of two micro-batches on collective
// groups of their own, over every CPU backend.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "free_port.hpp"
#include "actors/overlap_runner.hpp"
#include "comms/collectives/group_factory.hpp"

using namespace actord;
using namespace std::chrono_literals;

namespace {

// Two ranks' communicators of one group on `backend`, joined from two threads (ZeroMQ over tcp loopback, shared
// memory through a segment of this process's name, or in-process).
std::vector<std::unique_ptr<coll::Communicator>> pair_group(uint64_t id, coll::Backend backend) {
  coll::GroupSpec spec;
  spec.name = "overlap/" + std::to_string(id);
  spec.id = id;
  spec.size = 2;
  spec.timeout = 10s;
  spec.engine_pid = getpid();
  spec.backend = backend;
  if (backend == coll::Backend::in_process) {
    auto comms = coll::create_local_group(spec);
    REQUIRE(comms.ok());
    return std::move(*comms);
  }
  spec.placement = backend == coll::Backend::zmq ? coll::Placement::node : coll::Placement::process;
  if (backend == coll::Backend::zmq) {
    spec.endpoints = {"tcp://127.0.0.1:" + std::to_string(test::free_port()), "tcp://127.0.0.1:*"};
  }
  std::vector<std::unique_ptr<coll::Communicator>> comms(2);
  std::vector<std::thread> joiners;
  for (int r = 0; r < 2; ++r) {
    joiners.emplace_back([&, r] {
      auto c = coll::join_group(spec, r);
      if (c.ok()) comms[size_t(r)] = std::move(*c);
    });
  }
  for (auto& t : joiners) t.join();
  REQUIRE(comms[0]);
  REQUIRE(comms[1]);
  return comms;
}

// What happened on a rank, in order.
struct Log {
  std::mutex mu;
  std::vector<std::string> events;
  void add(const std::string& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
  }
  size_t index(const std::string& e) {
    std::lock_guard lock(mu);
    return static_cast<size_t>(std::find(events.begin(), events.end(), e) - events.begin());
  }
};

}  // namespace

TEST_CASE("overlap runner: tasks that never wait run one after the other, the first first", "[overlap]") {
  OverlapRunner runner(3);
  std::vector<int> order;
  std::vector<std::function<void()>> tasks;
  for (int m = 0; m < 3; ++m) {
    tasks.push_back([&, m] {
      order.push_back(m * 10);
      order.push_back(m * 10 + 1);
    });
  }
  runner.run(tasks);
  CHECK(order == std::vector<int>{0, 1, 10, 11, 20, 21});
  // A runner runs again (its fibers start afresh).
  order.clear();
  runner.run(tasks);
  CHECK(order.size() == 6);
}

TEST_CASE("overlap runner: while a micro-batch's collective waits for a late peer the other computes - sums right - "
          "in-process - shared memory - zmq",
          "[overlap]") {
  // Rank 1's first micro-batch arrives 30 ms late: on rank 0 the second micro-batch starts and posts its own
  // all_reduce meanwhile, instead of after the first's returned.
  uint64_t id = 100;
  for (coll::Backend backend : {coll::Backend::in_process, coll::Backend::shared_memory, coll::Backend::zmq}) {
    INFO("backend " << static_cast<int>(backend));
    auto a = pair_group(++id, backend), b = pair_group(++id, backend);
    Log log0;
    std::vector<std::vector<float>> sums(4);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        OverlapRunner runner(2);
        std::vector<float> x(1000, float(r + 1)), y(1000, float(10 * (r + 1)));
        std::vector<std::function<void()>> tasks = {
            [&] {
              if (r == 1) std::this_thread::sleep_for(30ms);
              if (r == 0) log0.add("0 posts");
              REQUIRE(a[size_t(r)]->all_reduce(x).ok());
              if (r == 0) log0.add("0 returned");
            },
            [&] {
              if (r == 0) log0.add("1 starts");
              REQUIRE(b[size_t(r)]->all_reduce(y).ok());
              if (r == 0) log0.add("1 returned");
            }};
        runner.run(tasks);
        sums[size_t(2 * r)] = {x.front(), x.back()};
        sums[size_t(2 * r + 1)] = {y.front(), y.back()};
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) {
      CHECK(sums[size_t(2 * r)] == std::vector<float>{3.0f, 3.0f});
      CHECK(sums[size_t(2 * r + 1)] == std::vector<float>{30.0f, 30.0f});
    }
    CHECK(log0.index("0 posts") < log0.index("1 starts"));
    CHECK(log0.index("1 starts") < log0.index("0 returned"));
  }
}

TEST_CASE("overlap runner: an exception of a task comes out of run once every task ended - a micro-batch left "
          "alone waits as without overlap",
          "[overlap]") {
  auto a = pair_group(200, coll::Backend::in_process);
  std::atomic<bool> second_finished{false};
  std::vector<std::thread> ranks;
  std::vector<std::string> caught(2);
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      OverlapRunner runner(2);
      std::vector<float> x(10, 1.0f);
      std::vector<std::function<void()>> tasks = {
          [&] {
            // Rank 1 arrives late; on rank 0 the other micro-batch has ended by then (it throws at once).
            if (r == 1) std::this_thread::sleep_for(20ms);
            REQUIRE(a[size_t(r)]->all_reduce(x).ok());
            CHECK(x[0] == 2.0f);
          },
          [&, r] {
            if (r == 0) throw std::runtime_error("micro-batch 1 failed");
            second_finished = true;
          }};
      try {
        runner.run(tasks);
      } catch (const std::exception& e) {
        caught[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  CHECK(caught[0] == "micro-batch 1 failed");
  CHECK(caught[1].empty());
  CHECK(second_finished);
}
