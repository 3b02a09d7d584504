// Running ahead (WorkerCore::step): a lone rank's greedy step is left pending, the next one queued behind it with
// the pending step's picks as previous_pick tokens, and the pending one answered after. The CPU backend runs ahead
// when ACTORD_CPU_RUN_AHEAD=1 is set as it is made (it gains nothing there: its steps are computed when queued), so
// the worker's side of it (pending steps, answers in step order, steps that cannot run ahead finishing the pending
// one first) runs here on every CI machine; on a GPU it is the default (tests/cuda_backend_test.cpp).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "actors/worker_core.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "engine_test_util.hpp"
#include "worker_test_util.hpp"

using namespace actord;

namespace {

// An engine whose CPU workers run ahead (or not); `set`: topology overrides (a worker process inherits the setting).
std::unique_ptr<Engine> engine_running_ahead(bool ahead, std::vector<std::string> set = {}) {
  if (ahead) setenv("ACTORD_CPU_RUN_AHEAD", "1", 1);
  auto engine = test::start_engine(test::quickstart("configs/quickstart.yaml", std::move(set)));
  unsetenv("ACTORD_CPU_RUN_AHEAD");
  return engine;
}

// A WorkerCore on stories260K (4-token blocks, 16 of them), running ahead or not.
std::unique_ptr<WorkerCore> stories_worker(bool ahead) {
  if (ahead) setenv("ACTORD_CPU_RUN_AHEAD", "1", 1);
  auto core = test::stories_worker_core();
  unsetenv("ACTORD_CPU_RUN_AHEAD");
  return core;
}

// Step `id`: sequence 1's first slice {1, 403} (id 1; greedy unless `options` say otherwise), or its next token
// taken from the step before (id > 1, position id), or a slice of sequence 2 with a token outside the vocabulary
// (bad).
wire_msg step_of(uint64_t id, bool bad = false, const SamplingOptions* options = nullptr) {
  return build<wire::ExecuteStep>([&](wire::ExecuteStep::Builder out) {
    out.setStepId(id);
    out.setCorrelationId(100 + id);
    auto s = out.initSeqs(1)[0];
    s.setSample(true);
    if (bad || id == 1) {
      s.setSeqId(bad ? 2 : 1);
      fill_list(s.initTokenIds(2), std::vector<int32_t>{1, bad ? 9999 : 403});
      s.setNewSequence(true);
      SamplingOptions greedy;
      greedy.temperature = 0.0f;
      to_wire(options ? *options : greedy, s.initSampling());
      s.setPromptLen(2);
      fill_list(s.initBlockTable(2), std::vector<uint32_t>{bad ? 5u : 0u, bad ? 6u : 1u});
      return;
    }
    s.setSeqId(1);
    fill_list(s.initTokenIds(1), std::vector<int32_t>{0});
    s.setFromPrevious(0);
    s.setStartPos(static_cast<uint32_t>(id));
  });
}

struct Answer {
  uint64_t step_id = 0;
  int32_t token = -1;
  std::string error;
  uint64_t compute_us = 0, idle_us = 0, late_us = 0;
};

Answer read_answer(const wire_msg& msg) {
  WireReader reader(msg);
  auto r = reader.root<wire::StepResult>();
  Answer a;
  a.step_id = r.getStepId();
  if (has_error(r.getError())) a.error = get_error(r.getError()).message;
  if (r.getResults().size() > 0) a.token = r.getResults()[0].getTokenId();
  a.compute_us = r.getComputeMicros();
  a.idle_us = r.getIdleMicros();
  a.late_us = r.getAnsweredLateMicros();
  return a;
}

}  // namespace

TEST_CASE("WorkerCore running ahead answers each step after the next is queued - in order - a refused step first "
          "answers the pending one",
          "[run_ahead]") {
  // The tokens one step at a time.
  auto plain = stories_worker(false);
  std::vector<int32_t> want;
  for (uint64_t id = 1; id <= 3; ++id) want.push_back(read_answer(plain->execute(step_of(id))).token);

  auto core = stories_worker(true);
  std::vector<wire_msg> done;
  core->step(step_of(1), done);
  CHECK(done.empty());  // pending: answered once step 2 is queued behind it
  CHECK(core->has_pending());
  core->step(step_of(2), done);  // its token: step 1's pick, resolved where the embedding runs
  REQUIRE(done.size() == 1);
  CHECK(read_answer(done[0]).step_id == 1);
  CHECK(read_answer(done[0]).token == want[0]);
  done.clear();
  core->step(step_of(3), done);
  REQUIRE(done.size() == 1);
  CHECK(read_answer(done[0]).token == want[1]);
  done.clear();
  // A refused step answers the pending one first, then itself.
  core->step(step_of(4, true), done);
  REQUIRE(done.size() == 2);
  CHECK(read_answer(done[0]).step_id == 3);
  CHECK(read_answer(done[0]).token == want[2]);
  CHECK(read_answer(done[1]).step_id == 4);
  CHECK_THAT(read_answer(done[1]).error, Catch::Contains("outside the vocabulary"));
  CHECK_FALSE(core->has_pending());
  // The step after a failed one cannot take its token (as without running ahead).
  done.clear();
  core->step(step_of(5), done);
  REQUIRE(done.size() == 1);
  CHECK_THAT(read_answer(done[0]).error, Catch::Contains("did not sample"));
}

TEST_CASE("WorkerCore runs seeded draws ahead when its backend draws them - penalties and logprobs answer first",
          "[run_ahead]") {
  SamplingOptions drawn;
  drawn.temperature = 0.9f;
  drawn.top_p = 0.95f;
  drawn.top_k = 40;
  drawn.seed = 5;
  auto plain = stories_worker(false);
  std::vector<int32_t> want;
  for (uint64_t id = 1; id <= 4; ++id) want.push_back(read_answer(plain->execute(step_of(id, false, &drawn))).token);

  auto core = stories_worker(true);
  std::vector<wire_msg> done;
  core->step(step_of(1, false, &drawn), done);
  CHECK(done.empty());
  CHECK(core->has_pending());  // its token drawn by the backend and kept for step 2
  for (uint64_t id = 2; id <= 4; ++id) {
    core->step(step_of(id, false, &drawn), done);
    REQUIRE(done.size() == 1);
    CHECK(read_answer(done[0]).step_id == id - 1);
    CHECK(read_answer(done[0]).token == want[id - 2]);
    done.clear();
  }
  CHECK(read_answer(core->finish_pending()).token == want[3]);

  // With penalties (the history would miss the pending step's token) or logprobs (not in a device's picks) a draw
  // does not run ahead: it answers the pending step first.
  SamplingOptions penalised = drawn;
  penalised.repetition_penalty = 1.3f;
  SamplingOptions with_logprobs = drawn;
  with_logprobs.logprobs = 2;
  for (const SamplingOptions* options : {&penalised, &with_logprobs}) {
    auto other = stories_worker(true);
    other->step(step_of(1, false, options), done);
    CHECK(done.size() == 1);
    CHECK_FALSE(other->has_pending());
    done.clear();
  }
}

TEST_CASE("a step answered after the next is queued says how late - its compute time ends when it was done",
          "[run_ahead]") {
  // The CPU backend's steps are done when queued: step 1 is done at once, held while the worker waits for step 2.
  auto core = stories_worker(true);
  std::vector<wire_msg> done;
  core->step(step_of(1), done);
  REQUIRE(core->has_pending());
  CHECK(core->pending_done());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  core->step(step_of(2), done);
  REQUIRE(done.size() == 1);
  const Answer first = read_answer(done[0]);
  CHECK(first.step_id == 1);
  CHECK(first.late_us >= 50000);     // held through the wait and step 2
  CHECK(first.compute_us < 50000);   // not the wait: stories260K's step takes a few ms
  done.clear();
  const Answer second = read_answer(core->finish_pending());
  CHECK(second.step_id == 2);
  CHECK(second.idle_us >= 50000);    // idle since step 1 was done, not since it was answered
  CHECK(second.compute_us < 50000);
  CHECK(second.late_us < 50000);
  // A step not run ahead is answered when done.
  auto plain = stories_worker(false);
  const Answer one = read_answer(plain->execute(step_of(1)));
  CHECK(one.late_us == 0);
}

TEST_CASE("a worker that runs ahead keeps every token - greedy prefixes alone, then with seeded draws among them",
          "[engine][run_ahead]") {
  auto ahead = engine_running_ahead(true);
  // Greedy only: every step runs ahead of the one before.
  const std::vector<GenerateRequest> prefixes = test::reference_prefix_requests();
  const auto t0 = std::chrono::steady_clock::now();
  auto alone = ahead->generate(prefixes);
  const auto wall_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                                    std::chrono::steady_clock::now() - t0).count());
  REQUIRE(alone.ok());
  test::check_continues_reference(*alone, prefixes, prefixes.size());
  // Steps answered a step late are booked once: the worker's compute and the scheduler's step times fit the run.
  auto stats = ahead->stats();
  REQUIRE(stats.ok());
  CHECK(stats->worker_compute_us > 0);
  CHECK(stats->worker_compute_us <= wall_us);
  CHECK(stats->prefill_us + stats->decode_us <= wall_us);

  // Seeded draws among them that end early: one without penalties (its steps run ahead, the CPU backend drawing its
  // token), one with (its steps cannot: the pending step is answered first), and a request of two samples (a forking
  // slice, which cannot either).
  std::vector<GenerateRequest> mixed = prefixes;
  for (int k = 0; k < 3; ++k) {
    GenerateRequest drawn;
    drawn.prompt_ids = {1, 403, 121, int32_t(30 + k)};
    drawn.max_tokens = uint32_t(6 + 5 * k);
    drawn.sampling.temperature = 0.9f;
    drawn.sampling.top_p = 0.95f;
    drawn.sampling.repetition_penalty = k == 0 ? 1.0f : 1.2f;
    drawn.sampling.seed = uint64_t(7 + k);
    drawn.sampling.n = k == 2 ? 2 : 1;
    mixed.push_back(drawn);
  }
  auto with_draws = ahead->generate(mixed);
  REQUIRE(with_draws.ok());
  test::check_continues_reference(*with_draws, mixed, prefixes.size());

  auto plain = engine_running_ahead(false);
  auto without = plain->generate(mixed);
  REQUIRE(without.ok());
  REQUIRE(without->size() == with_draws->size());
  for (size_t i = prefixes.size(); i < with_draws->size(); ++i) {
    INFO("output " << i);
    if ((*with_draws)[i].error) FAIL((*with_draws)[i].error->message);
    CHECK_FALSE((*with_draws)[i].generated_ids.empty());
    CHECK((*with_draws)[i].generated_ids == (*without)[i].generated_ids);
  }
}

TEST_CASE("a worker process that runs ahead answers its steps in order with every token", "[engine][run_ahead]") {
  auto ahead = engine_running_ahead(true, {"groups[0].placement=process"});
  std::vector<GenerateRequest> mixed = test::reference_prefix_requests();
  const size_t greedy = mixed.size();
  std::vector<GenerateRequest> draws(2);
  for (size_t k = 0; k < draws.size(); ++k) {
    draws[k].prompt_ids = {1, 403, 121};
    draws[k].max_tokens = 12;
    draws[k].sampling.temperature = 0.9f;
    draws[k].sampling.repetition_penalty = k == 0 ? 1.0f : 1.2f;  // the first runs ahead
    draws[k].sampling.seed = 11;
    mixed.push_back(draws[k]);
  }
  auto outputs = ahead->generate(mixed);
  REQUIRE(outputs.ok());
  test::check_continues_reference(*outputs, mixed, greedy);
  auto plain = engine_running_ahead(false);
  auto without = plain->generate(draws);
  REQUIRE(without.ok());
  for (size_t k = 0; k < draws.size(); ++k) {
    CHECK_FALSE((*outputs)[greedy + k].generated_ids.empty());
    CHECK((*outputs)[greedy + k].generated_ids == (*without)[k].generated_ids);
  }
}
