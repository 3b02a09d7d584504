// A worker that stops answering is declared failed in bounded time and its requests end with an error that says
// so (Step 6 will recover them instead): a worker thread stuck in a step (the scheduler's step deadline), a worker
// process stopped with SIGSTOP (its heartbeat), and a worker busy with one long step is not mistaken for either.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "engine_test_util.hpp"
#include "process_util.hpp"

using namespace actord;
using clock_type = std::chrono::steady_clock;

namespace {

// The worker processes of the engine in this process.
std::vector<pid_t> own_worker_processes() { return test::worker_processes_of(getpid()); }

// Whether worker `pid` has ended (it may still await its reaping) within `limit`.
bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  return test::eventually([&] {
    const auto live = own_worker_processes();
    return std::find(live.begin(), live.end(), pid) == live.end();
  }, limit);
}

// stories260K as a StallingLlamaForCausalLM that sleeps `stall_ms` in any step carrying token 400.
TopologyConfig stalling_topology(const test::TempDir& tmp, const std::string& placement, const std::string& timeout,
                                 int stall_ms) {
  const auto model = test::copy_stories(tmp.path());
  std::ifstream in(model / "config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["architectures"] = {"StallingLlamaForCausalLM"};
  cfg["stall_token"] = 400;
  cfg["stall_ms"] = stall_ms;
  test::write_file(model / "config.json", cfg.dump(2));
  test::write_file(tmp.path() / "t.yaml", "model: {path: stories260K}\nplugins: [" + std::string(ACTORD_STALL_PLUGIN) +
                                              "]\nengine: {step_timeout: " + timeout + "}\ngroups: [{placement: " +
                                              placement + ", threads: 1}]\n");
  auto topology = load_topology(tmp.path() / "t.yaml");
  REQUIRE(topology.ok());
  return *topology;
}

GenerateRequest request(std::vector<int32_t> prompt, uint32_t max_tokens) {
  GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  return r;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

}  // namespace

TEST_CASE("a worker thread stuck in a step is declared failed by the step deadline", "[failure]") {
  test::TempDir tmp;
  auto engine = test::start_engine(stalling_topology(tmp, "thread", "300ms", 4000));
  // Steps of both kinds (with prefill, decode only) teach the scheduler what a step costs.
  auto calibrate = engine->generate({request({1, 403, 407}, 8)});
  REQUIRE(calibrate.ok());
  REQUIRE_FALSE((*calibrate)[0].error);

  const auto t0 = clock_type::now();
  auto stuck = engine->generate({request({1, 400, 407}, 8)});
  const double waited = seconds_since(t0);
  REQUIRE(stuck.ok());
  REQUIRE((*stuck)[0].error);
  CHECK((*stuck)[0].error->code == Errc::worker_failed);
  CHECK_THAT((*stuck)[0].error->message, Catch::Contains("worker stopped answering: step") &&
                                             Catch::Contains("engine.step_timeout 300 ms"));
  CHECK((*stuck)[0].finish_reason == "error");
  CHECK(waited < 3.0);  // well before the 4 s stall ends: declared failed, not waited out

  // The worker stays failed: the next request ends with an error at once instead of hanging.
  auto after = engine->generate({request({1, 403}, 4)});
  REQUIRE(after.ok());
  REQUIRE((*after)[0].error);
  CHECK((*after)[0].error->code == Errc::worker_failed);
}

TEST_CASE("a stopped worker process is detected by its heartbeat, killed and reported", "[failure][process]") {
  auto cfg = test::quickstart("configs/quickstart-2proc.yaml", {"engine.step_timeout=500ms"});
  auto engine = test::start_engine(cfg);
  const auto workers = own_worker_processes();
  REQUIRE(workers.size() == 1);
  // Stopped before any step: no step time is known yet, only the heartbeat can tell.
  REQUIRE(kill(workers[0], SIGSTOP) == 0);

  const auto t0 = clock_type::now();
  auto out = engine->generate({request({1, 403, 407}, 16)});
  const double waited = seconds_since(t0);
  REQUIRE(out.ok());
  REQUIRE((*out)[0].error);
  CHECK((*out)[0].error->code == Errc::worker_failed);
  CHECK_THAT((*out)[0].error->message,
             Catch::Contains("(pid " + std::to_string(workers[0]) + ") stopped answering: no heartbeat for") &&
                 Catch::Contains("killed it"));
  CHECK(waited < 5.0);
  CHECK(gone_within(workers[0], std::chrono::seconds(2)));
}

TEST_CASE("a worker process stopped mid-run fails its running requests in bounded time", "[failure][process]") {
  auto cfg = test::quickstart("configs/quickstart-2proc.yaml", {"engine.step_timeout=500ms"});
  auto engine = test::start_engine(cfg);
  const auto workers = own_worker_processes();
  REQUIRE(workers.size() == 1);
  // The callback stops the worker at the request's 20th token, so it is surely still running then.
  std::mutex m;
  std::condition_variable cv;
  int tokens = 0;
  std::optional<clock_type::time_point> stopped_at;
  std::optional<StreamEvent> last;
  engine->submit(request({1, 403, 407}, 400), [&](const StreamEvent& e) {
    std::lock_guard lock(m);
    tokens += static_cast<int>(e.token_ids.size());
    if (tokens >= 20 && !stopped_at) {
      stopped_at = clock_type::now();
      kill(workers[0], SIGSTOP);
    }
    if (!e.finish_reason.empty()) last = e;
    cv.notify_all();
  });
  std::unique_lock lock(m);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return last.has_value(); }));
  REQUIRE(stopped_at);
  CHECK(seconds_since(*stopped_at) < 5.0);
  CHECK(tokens < 400);
  REQUIRE(last->error);
  CHECK(last->error->code == Errc::worker_failed);
  CHECK_THAT(last->error->message, Catch::Contains("stopped answering"));
  CHECK(gone_within(workers[0], std::chrono::seconds(2)));
}

TEST_CASE("a worker process busy with one long step keeps beating and is not declared failed", "[failure][process]") {
  test::TempDir tmp;
  // The first step stalls 1.5 s, three times engine.step_timeout: with no step time known yet only the heartbeat
  // watches the worker, and its heartbeat thread goes on during the step.
  auto engine = test::start_engine(stalling_topology(tmp, "process", "500ms", 1500));
  auto out = engine->generate({request({1, 400, 407}, 8)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids.size() == 8);
}
