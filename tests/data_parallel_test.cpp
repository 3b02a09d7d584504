// Data parallel groups while serving: 32 streams over two replicas survive a kill -9 of one replica's worker (or
// of a TP rank of it) with every answer equal to a clean run, the killed replica rebuilt and the other one serving
// throughout; the group scales up and down while requests flow, losing and duplicating nothing; impossible scales
// are refused and change nothing; a scale-up spreads what waits on the busy replica over the grown group.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine_test_util.hpp"
#include "process_util.hpp"

using namespace actord;
using clock_type = std::chrono::steady_clock;

namespace {

// 32 different greedy prompts of stories260K, long enough (200 tokens) that a kill lands while they run.
std::vector<GenerateRequest> streams(size_t count, uint32_t max_tokens) {
  std::vector<GenerateRequest> out;
  for (size_t i = 0; i < count; ++i) {
    GenerateRequest r;
    r.prompt_ids = {1, static_cast<int32_t>(3 + (i * 37) % 500), static_cast<int32_t>(3 + (i * 91) % 500)};
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    out.push_back(std::move(r));
  }
  return out;
}

// Runs `requests` as concurrent streams; `during(events so far)` is called on every event (engine thread).
struct StreamRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::optional<Error>> errors;
  std::vector<std::string> finish;
  std::vector<clock_type::time_point> finished_at;
};

StreamRun run_streams(Engine& engine, const std::vector<GenerateRequest>& requests,
                      const std::function<void(size_t)>& during = {}) {
  StreamRun run;
  run.tokens.resize(requests.size());
  run.errors.resize(requests.size());
  run.finish.resize(requests.size());
  run.finished_at.resize(requests.size());
  std::mutex m;
  std::condition_variable cv;
  size_t left = requests.size(), events = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    engine.submit(requests[i], [&, i](const StreamEvent& e) {
      std::lock_guard lock(m);
      run.tokens[i].insert(run.tokens[i].end(), e.token_ids.begin(), e.token_ids.end());
      if (e.error) run.errors[i] = e.error;
      if (during) during(++events);
      if (!e.finish_reason.empty()) {
        run.finish[i] = e.finish_reason;
        run.finished_at[i] = clock_type::now();
        --left;
        cv.notify_all();
      }
    });
  }
  std::unique_lock lock(m);
  if (!cv.wait_for(lock, std::chrono::seconds(120), [&] { return left == 0; })) FAIL("streams did not finish in 120 s");
  return run;
}

void check_equal(const StreamRun& got, const std::vector<GenerateOutput>& clean) {
  REQUIRE(got.tokens.size() == clean.size());
  size_t failures = 0, differ = 0;
  for (size_t i = 0; i < clean.size(); ++i) {
    INFO("stream " << i << (got.errors[i] ? ": " + got.errors[i]->message : std::string()));
    if (got.errors[i]) ++failures;
    if (got.tokens[i] != clean[i].generated_ids) ++differ;  // a duplicated or lost token shows here
    CHECK_FALSE(got.errors[i]);
    CHECK(got.finish[i] == "length");
  }
  CHECK(failures == 0);
  CHECK(differ == 0);
}

// The pid of the worker process whose --name is `rank`.
pid_t worker_named(const std::string& rank) {
  for (pid_t pid : test::worker_processes_of(getpid())) {
    const auto args = test::process_args("/proc/" + std::to_string(pid));
    if (std::find(args.begin(), args.end(), rank) != args.end()) return pid;
  }
  return 0;
}

bool fleet_serving(Engine& engine, size_t replicas) {
  auto fleet = engine.fleet();
  if (!fleet || fleet->replicas.size() != replicas) return false;
  return std::all_of(fleet->replicas.begin(), fleet->replicas.end(),
                     [](const ReplicaInfo& r) { return r.state == "serving"; });
}

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

TEST_CASE("dp2: kill -9 of a replica's worker while 32 streams run - every answer completes, equal to a clean run",
          "[engine][dp][failure]") {
  for (const char* file : {"configs/dp2.yaml", "configs/dp2-tp2.yaml"}) {
    DYNAMIC_SECTION(file) {
      const bool tp = std::string(file).find("tp2") != std::string::npos;
      auto engine = test::start_engine(test::quickstart(file, {"groups[0].placement=process"}));
      const auto requests = streams(32, 200);
      auto clean = engine->generate(requests);
      REQUIRE(clean.ok());
      // Kill replica 1's worker (with tp: its tp rank 1, a follower) once the streams are well under way.
      const std::string victim_name = tp ? "replica/1/worker/tp1.pp0" : "replica/1/worker/0";
      const pid_t victim = worker_named(victim_name);
      REQUIRE(victim > 0);
      std::optional<clock_type::time_point> killed_at;
      auto run = run_streams(*engine, requests, [&](size_t events) {
        if (events == 200 && !killed_at) {
          killed_at = clock_type::now();
          kill(victim, SIGKILL);
        }
      });
      REQUIRE(killed_at);
      check_equal(run, *clean);
      const auto last = *std::max_element(run.finished_at.begin(), run.finished_at.end());
      WARN(file << ": kill -9 -> last stream complete " << seconds(last - *killed_at) << " s");
      REQUIRE(test::eventually([&] { return fleet_serving(*engine, 2); }, std::chrono::seconds(20)));
      auto fleet = engine->fleet();
      REQUIRE(fleet.ok());
      CHECK(fleet->replacements == 1);
      CHECK(fleet->replicas.at(0).incarnation == 0);  // the other replica kept serving
      CHECK(fleet->replicas.at(1).incarnation == 1);
      CHECK(worker_named(victim_name) != victim);
      // And it serves again: a second round, equal too.
      check_equal(run_streams(*engine, requests), *clean);
      engine.reset();
      CHECK(test::worker_processes_of(getpid()).empty());
    }
  }
}

TEST_CASE("dp: scale up and down while streams run - nothing fails, nothing is duplicated", "[engine][dp][scale]") {
  auto engine = test::start_engine(test::quickstart("configs/dp2.yaml", {"groups[0].replicas=1"}));
  const auto requests = streams(32, 120);
  auto clean = engine->generate(requests);
  REQUIRE(clean.ok());
  REQUIRE(fleet_serving(*engine, 1));

  // Up: 1 -> 2 while the streams run; the new replica takes part of them.
  std::thread scaler;
  std::optional<Status> scaled;
  double add_seconds = 0;
  auto up = run_streams(*engine, requests, [&](size_t events) {
    if (events == 50) scaler = std::thread([&] {
        const auto t0 = clock_type::now();
        scaled = engine->scale("main", 2);
        add_seconds = seconds(clock_type::now() - t0);
      });
  });
  scaler.join();
  REQUIRE(scaled);
  INFO((scaled->ok() ? std::string() : scaled->error().message));
  REQUIRE(scaled->ok());
  WARN("time to add a replica (process, stories260K): " << add_seconds << " s");
  check_equal(up, *clean);
  CHECK(fleet_serving(*engine, 2));

  // Down: 2 -> 1 while the streams run: the removed replica drains.
  std::optional<Status> shrunk;
  auto down = run_streams(*engine, requests, [&](size_t events) {
    if (events == 50) scaler = std::thread([&] { shrunk = engine->scale("main", 1); });
  });
  scaler.join();
  REQUIRE(shrunk);
  REQUIRE(shrunk->ok());
  check_equal(down, *clean);
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  REQUIRE(fleet->replicas.size() == 1);
  CHECK(fleet->replicas[0].index == 0);
  REQUIRE(test::eventually([&] { return test::worker_processes_of(getpid()).size() == 1; }, std::chrono::seconds(5)));
}

TEST_CASE("dp: a scale-up spreads what waits on the busy replica over the grown group - the outputs stay a clean "
          "run's", "[engine][dp][scale]") {
  // Two sequences run at a time: the rest of the 16 wait on replica 0 when the second replica joins.
  auto engine = test::start_engine(test::quickstart(
      "configs/dp2.yaml", {"groups[0].replicas=1", "groups[0].placement=thread", "engine.max_num_seqs=2"}));
  const auto requests = streams(16, 400);
  auto clean = engine->generate(requests);
  REQUIRE(clean.ok());
  std::thread scaler;
  std::optional<Status> scaled;
  auto run = run_streams(*engine, requests, [&](size_t events) {
    if (events == 20) scaler = std::thread([&] { scaled = engine->scale("main", 2); });
  });
  scaler.join();
  REQUIRE(scaled);
  INFO((scaled->ok() ? std::string() : scaled->error().message));
  REQUIRE(scaled->ok());
  check_equal(run, *clean);
  auto stats = engine->stats();
  REQUIRE(stats.ok());
  CHECK(stats->rebalanced_seqs > 0);
  CHECK(stats->rebalanced_seqs <= requests.size());
  WARN("sequences handed back by replica 0 when replica 1 joined: " << stats->rebalanced_seqs);
}

TEST_CASE("dp: impossible scales are refused with a clear error and change nothing", "[engine][dp][scale]") {
  auto engine = test::start_engine(test::quickstart("configs/dp2.yaml"));
  REQUIRE(fleet_serving(*engine, 2));
  auto refused = [&](const std::string& group, int replicas, const std::string& why) {
    const Status s = engine->scale(group, replicas);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Catch::Contains(why));
    CHECK(fleet_serving(*engine, 2));
  };
  refused("main", -1, "replicas: must be at least 1, got -1");
  refused("main", 0, "replicas: must be at least 1, got 0");
  refused("other", 3, "unknown group \"other\" (the topology has: main)");
  refused("main", 64, "cores");  // 64 one-thread ranks on this machine, without oversubscribe
  // Still serving, still two replicas.
  auto out = engine->generate(streams(4, 8));
  REQUIRE(out.ok());
  for (const auto& o : *out) CHECK_FALSE(o.error);
  CHECK(engine->scale("main", 2).ok());  // already so: nothing to do
}
