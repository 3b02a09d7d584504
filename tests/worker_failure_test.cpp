// A worker that stops answering is declared failed in bounded time, its replica is rebuilt and its requests continue
// there from their tokens so far, unchanged: a worker thread stuck in a step (the scheduler's step deadline), a
// worker process stopped with SIGSTOP (its heartbeat); and a worker busy with one long step is not mistaken for
// either. A request that kills every worker it reaches ends with an error instead of being retried for ever.
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
                                 int stall_ms, int stall_times = -1, int abort_token = -1) {
  const auto model = test::copy_stories(tmp.path());
  std::ifstream in(model / "config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["architectures"] = {"StallingLlamaForCausalLM"};
  cfg["stall_token"] = 400;
  cfg["stall_ms"] = stall_ms;
  if (stall_times >= 0) cfg["stall_times"] = stall_times;
  if (abort_token >= 0) cfg["abort_token"] = abort_token;
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

TEST_CASE("a worker thread stuck in a step is declared failed by the step deadline - its request continues",
          "[failure]") {
  test::TempDir tmp;
  // The first step with token 400 in this process stalls 4 s; the rebuilt replica's worker does not.
  auto engine = test::start_engine(stalling_topology(tmp, "thread", "300ms", 4000, 1));
  // Steps of both kinds (with prefill, decode only) teach the scheduler what a step costs.
  auto calibrate = engine->generate({request({1, 403, 407}, 8)});
  REQUIRE(calibrate.ok());
  REQUIRE_FALSE((*calibrate)[0].error);

  const auto t0 = clock_type::now();
  auto stuck = engine->generate({request({1, 400, 407}, 8)});
  const double waited = seconds_since(t0);
  REQUIRE(stuck.ok());
  INFO(((*stuck)[0].error ? (*stuck)[0].error->message : std::string("no error")));
  REQUIRE_FALSE((*stuck)[0].error);
  CHECK(waited < 3.0);  // well before the 4 s stall ends: declared failed and recovered, not waited out
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  CHECK(fleet->replacements == 1);
  CHECK_THAT(fleet->replicas.at(0).last_failure, Catch::Contains("worker stopped answering: step") &&
                                                     Catch::Contains("engine.step_timeout 300 ms"));
  // The same request again, now on a worker that does not stall: the same tokens.
  auto clean = engine->generate({request({1, 400, 407}, 8)});
  REQUIRE(clean.ok());
  REQUIRE_FALSE((*clean)[0].error);
  CHECK((*stuck)[0].generated_ids == (*clean)[0].generated_ids);
}

TEST_CASE("a request that kills every worker it reaches ends with an error after three hand-backs - the others and "
          "the engine go on", "[failure][process]") {
  test::TempDir tmp;
  // Steps carrying token 401 abort the worker process; nothing stalls.
  auto engine = test::start_engine(stalling_topology(tmp, "process", "30s", 0, -1, 401));
  const auto t0 = clock_type::now();
  auto poison = engine->generate({request({1, 401, 407}, 8)});
  REQUIRE(poison.ok());
  REQUIRE((*poison)[0].error);
  CHECK_THAT((*poison)[0].error->message, Catch::Contains("handed back 3 times without a token generated between") &&
                                              Catch::Contains("signal 6"));
  CHECK(seconds_since(t0) < 30.0);
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  CHECK(fleet->replacements == 4);  // the first try and three more, each on a rebuilt replica
  auto after = engine->generate({request({1, 403, 407}, 8)});
  REQUIRE(after.ok());
  REQUIRE_FALSE((*after)[0].error);
  CHECK((*after)[0].generated_ids.size() == 8);
}

TEST_CASE("a stopped worker process is detected by its heartbeat, killed and replaced", "[failure][process]") {
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
  INFO(((*out)[0].error ? (*out)[0].error->message : std::string("no error")));
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids.size() == 16);
  CHECK(waited < 5.0);
  CHECK(gone_within(workers[0], std::chrono::seconds(2)));
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  CHECK_THAT(fleet->replicas.at(0).last_failure,
             Catch::Contains("(pid " + std::to_string(workers[0]) + ") stopped answering: no heartbeat for") &&
                 Catch::Contains("killed it"));
  auto again = engine->generate({request({1, 403, 407}, 16)});
  REQUIRE(again.ok());
  CHECK((*again)[0].generated_ids == (*out)[0].generated_ids);
}

TEST_CASE("an idle worker process killed is replaced at once, before any request reaches its replica",
          "[failure][process]") {
  auto cfg = test::quickstart("configs/quickstart-2proc.yaml", {"engine.step_timeout=500ms"});
  auto engine = test::start_engine(cfg);
  const auto workers = own_worker_processes();
  REQUIRE(workers.size() == 1);
  REQUIRE(kill(workers[0], SIGKILL) == 0);
  // No request is sent: the coordinator learns of the loss from the worker's link, not from a failed step.
  REQUIRE(test::eventually([&] {
    auto f = engine->fleet();
    return f.ok() && f->replicas.size() == 1 && f->replicas[0].incarnation == 1 && f->replicas[0].state == "serving";
  }, std::chrono::seconds(10)));
  const auto replaced = own_worker_processes();
  REQUIRE(replaced.size() == 1);
  CHECK(replaced[0] != workers[0]);
  auto out = engine->generate({request({1, 403, 407}, 16)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids.size() == 16);
}

TEST_CASE("a worker process stopped mid-run: its running request continues on the rebuilt replica, unchanged",
          "[failure][process]") {
  auto cfg = test::quickstart("configs/quickstart-2proc.yaml", {"engine.step_timeout=500ms"});
  auto engine = test::start_engine(cfg);
  const auto workers = own_worker_processes();
  REQUIRE(workers.size() == 1);
  auto clean = engine->generate({request({1, 403, 407}, 400)});
  REQUIRE(clean.ok());
  REQUIRE_FALSE((*clean)[0].error);
  // The callback stops the worker at the request's 20th token, so it is surely still running then.
  std::mutex m;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::optional<clock_type::time_point> stopped_at;
  std::optional<StreamEvent> last;
  engine->submit(request({1, 403, 407}, 400), [&](const StreamEvent& e) {
    std::lock_guard lock(m);
    tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (tokens.size() >= 20 && !stopped_at) {
      stopped_at = clock_type::now();
      kill(workers[0], SIGSTOP);
    }
    if (!e.finish_reason.empty()) last = e;
    cv.notify_all();
  });
  std::unique_lock lock(m);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return last.has_value(); }));
  REQUIRE(stopped_at);
  INFO((last->error ? last->error->message : std::string("no error")));
  REQUIRE_FALSE(last->error);
  CHECK(tokens == (*clean)[0].generated_ids);
  CHECK(seconds_since(*stopped_at) < 10.0);
  CHECK(gone_within(workers[0], std::chrono::seconds(2)));
}

// Before its first beat a worker process may still be starting (exec, its shared libraries, CUDA's among them):
// a start four times engine.step_timeout long is waited for, not declared silent.
TEST_CASE("a worker process slow to start (2 s before it runs, four times engine.step_timeout) is not declared failed",
          "[failure][process]") {
  test::TempDir tmp;
  const auto slow = tmp.path() / "slow-actord";
  test::write_file(slow, "#!/bin/sh\nsleep 2\nexec '" + test::actord_binary().string() + "' \"$@\"\n");
  std::filesystem::permissions(slow, std::filesystem::perms::owner_all);
  EngineOptions options = test::engine_options();
  options.worker_executable = slow;
  auto engine = Engine::start(stalling_topology(tmp, "process", "500ms", 0), options);
  if (!engine) FAIL(engine.error().message);
  auto out = (*engine)->generate({request({1, 403, 407}, 8)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids.size() == 8);
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
