// The whole actor system through the Engine API: reference output in one process and in two, batching, chunked
// prefill, preemption, bad requests, and worker processes that die.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/engine.hpp"
#include "engine_test_util.hpp"
#include "process_util.hpp"

using namespace actord;
using test::quickstart;

namespace {

GenerateRequest greedy(std::vector<int32_t> prompt, uint32_t max_tokens) {
  GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

}  // namespace

TEST_CASE("one process - greedy from BOS reproduces the 256-token reference", "[engine]") {
  auto engine = test::start_engine(quickstart());
  auto out = engine->generate({greedy({1}, 256)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids == test::reference_ids());
  CHECK((*out)[0].finish_reason == "length");
  CHECK((*out)[0].ttft_ms > 0);
  CHECK_THAT((*out)[0].text, Catch::StartsWith("Once upon a time, there was a little girl named Lily."));
}

TEST_CASE("two processes - the worker behind ZeroMQ gives the same 256 tokens", "[engine][process]") {
  auto engine = test::start_engine(quickstart("configs/quickstart-2proc.yaml"));
  auto out = engine->generate({greedy({1}, 256)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids == test::reference_ids());
}

TEST_CASE("prompts submitted together are batched and each equals its solo run", "[engine]") {
  const auto ref = test::reference_ids();
  std::vector<GenerateRequest> requests;
  // Prompts are prefixes of the reference: each continues it exactly.
  for (int cut : {0, 3, 17, 40, 90, 5, 60, 120}) {
    std::vector<int32_t> prompt{1};
    prompt.insert(prompt.end(), ref.begin(), ref.begin() + cut);
    requests.push_back(greedy(prompt, 24));
  }
  constexpr uint64_t kBudget = 32;
  for (const char* file : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    INFO(file);
    // A small token budget forces chunked prefill mixed with decode in the same steps. No prefix cache: every
    // prompt token is computed in every run, so the step counts below are those of the prompts' lengths.
    auto engine = test::start_engine(quickstart(
        file, {"engine.max_num_batched_tokens=" + std::to_string(kBudget), "engine.enable_prefix_caching=false"}));
    const auto before = engine->stats();
    auto together = engine->generate(requests);
    REQUIRE(together.ok());
    const EngineStats batched = stats_between(*before, *engine->stats());
    uint64_t solo_steps = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto start = engine->stats();
      auto alone = engine->generate({requests[i]});
      REQUIRE(alone.ok());
      const EngineStats solo = stats_between(*start, *engine->stats());
      solo_steps += solo.steps;
      CHECK((*together)[i].generated_ids == (*alone)[0].generated_ids);
      const size_t cut = requests[i].prompt_ids.size() - 1;
      CHECK((*together)[i].generated_ids ==
            std::vector<int32_t>(ref.begin() + cut, ref.begin() + cut + 24));
      // Alone, a prompt longer than the budget is fed in chunks, one step each, before its 23 decode steps.
      const uint64_t prompt_len = requests[i].prompt_ids.size();
      INFO("prompt of " << prompt_len << " tokens alone: " << solo.steps << " steps");
      CHECK(solo.prefill_tokens == prompt_len);
      CHECK(solo.steps >= (prompt_len + kBudget - 1) / kBudget + 23);
    }
    // Together, sequences shared steps, decode tokens rode in steps with prompt chunks, and the batch took fewer
    // steps than the requests one after the other (38-49 of 199 on a quiet machine; how much fewer depends on how
    // close together the requests reach the scheduler, which a loaded 2-core machine spreads: 120 seen in CI).
    INFO("batched: " << batched.steps << " steps, at most " << batched.max_seqs_in_step << " sequences in one; solo: "
                     << solo_steps << " steps");
    CHECK(batched.max_seqs_in_step > 1);
    CHECK(test::decode_tokens_in_mixed_steps(batched) > 0);
    CHECK(batched.steps < solo_steps);
  }
}

TEST_CASE("a KV cache too small for the batch preempts and still gives every request its exact output", "[engine]") {
  // 8 blocks of 16 tokens = 128 token slots for 6 sequences of up to 1 + 10 + 40 tokens.
  const auto ref = test::reference_ids();
  auto cfg = quickstart("configs/quickstart.yaml", {"engine.kv_cache_memory=80KiB"});
  auto engine = test::start_engine(cfg);
  std::vector<GenerateRequest> requests;
  for (int cut = 0; cut < 6; ++cut) {
    std::vector<int32_t> prompt{1};
    prompt.insert(prompt.end(), ref.begin(), ref.begin() + cut * 2);
    requests.push_back(greedy(prompt, 40));
  }
  auto out = engine->generate(requests);
  REQUIRE(out.ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    REQUIRE_FALSE((*out)[i].error);
    const size_t cut = i * 2;
    CHECK((*out)[i].generated_ids == std::vector<int32_t>(ref.begin() + cut, ref.begin() + cut + 40));
  }
  // The pool really was too small: sequences ran together, some were preempted and their prompts recomputed.
  auto stats = engine->stats();
  REQUIRE(stats.ok());
  INFO("preemptions " << stats->preemptions << ", at most " << stats->max_seqs_in_step << " sequences in a step");
  CHECK(stats->preemptions > 0);
  CHECK(stats->max_seqs_in_step > 1);
  uint64_t prompt_tokens = 0;
  for (const auto& r : requests) prompt_tokens += r.prompt_ids.size();
  CHECK(stats->prefill_tokens > prompt_tokens);
}

TEST_CASE("seeded sampling is reproducible and independent of batching", "[engine]") {
  auto engine = test::start_engine(quickstart());
  GenerateRequest r;
  r.prompt = "Once upon a time";
  r.max_tokens = 40;
  r.sampling = SamplingOptions{0.9f, 0.95f, 40, 1234};
  auto a = engine->generate({r});
  auto b = engine->generate({greedy({1, 403}, 30), r, greedy({1}, 10)});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)[0].generated_ids == (*b)[1].generated_ids);
  CHECK((*a)[0].prompt_ids == std::vector<int32_t>{1, 403, 407, 261, 378});
}

TEST_CASE("streamed text deltas add up to the full text", "[engine]") {
  auto engine = test::start_engine(quickstart());
  std::string streamed;
  auto out = engine->generate({greedy({1}, 100)}, [&](size_t, std::string_view d) { streamed += d; });
  REQUIRE(out.ok());
  CHECK(streamed == (*out)[0].text);
  CHECK(streamed.size() > 100);
}

TEST_CASE("bad requests get an error and the engine keeps serving", "[engine]") {
  auto engine = test::start_engine(quickstart());
  std::vector<int32_t> too_long(600, 5);
  too_long[0] = 1;
  auto out = engine->generate({greedy(too_long, 4), greedy({1, 9999}, 4), greedy({1}, 8)});
  REQUIRE(out.ok());
  REQUIRE((*out)[0].error);
  CHECK((*out)[0].error->message == "the prompt has 600 tokens, more than the context length of 512");
  REQUIRE((*out)[1].error);
  CHECK((*out)[1].error->code == Errc::invalid_argument);
  REQUIRE_FALSE((*out)[2].error);
  const auto ref = test::reference_ids();
  CHECK((*out)[2].generated_ids == std::vector<int32_t>(ref.begin(), ref.begin() + 8));
}

TEST_CASE("engine start-up errors name the problem", "[engine]") {
  test::TempDir tmp;
  auto cfg = quickstart();
  cfg.model.path = tmp.path() / "missing";
  auto missing = Engine::start(cfg, test::engine_options());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == Errc::not_found);

  cfg.model.path = test::copy_stories(tmp.path());
  {
    std::ifstream in(cfg.model.path / "config.json");
    auto j = nlohmann::json::parse(in);
    j["architectures"] = {"BertModel"};
    test::write_file(cfg.model.path / "config.json", j.dump());
  }
  auto arch = Engine::start(cfg, test::engine_options());
  REQUIRE_FALSE(arch.ok());
  CHECK(arch.error().code == Errc::unsupported);
  CHECK_THAT(arch.error().message, Catch::Contains("architecture 'BertModel' is not supported"));

  auto tiny_kv = quickstart("configs/quickstart.yaml", {"engine.kv_cache_memory=1KiB"});
  auto kv = Engine::start(tiny_kv, test::engine_options());
  REQUIRE_FALSE(kv.ok());
  CHECK_THAT(kv.error().message, Catch::Contains("engine.kv_cache_memory: 1024 bytes hold no KV block"));

  auto tiny_swap = quickstart("configs/quickstart.yaml", {"engine.preemption_mode=swap", "engine.swap_space=1KiB"});
  auto swap = Engine::start(tiny_swap, test::engine_options());
  REQUIRE_FALSE(swap.ok());
  CHECK_THAT(swap.error().message, Catch::Contains("engine.swap_space: 1024 bytes hold no KV block"));
}

TEST_CASE("two processes - the worker process and its link live exactly as long as the engine",
          "[engine][process]") {
  auto engine = test::start_engine(quickstart("configs/quickstart-2proc.yaml"));
  REQUIRE(engine->generate({greedy({1}, 4)}).ok());
  // While it runs: one worker, found by its command line, and the shared memory link both ends map.
  const std::vector<pid_t> workers = test::worker_processes_of(getpid());
  REQUIRE(workers.size() == 1);
  CHECK(test::worker_links_of(getpid()).size() == 2);  // the engine's mapping and the worker's
  engine.reset();
  // Stopping the engine reaps its worker and unmaps its link before it returns.
  CHECK(test::worker_processes_of(getpid()).empty());
  CHECK(test::worker_links_of(getpid()).empty());
  CHECK(kill(workers[0], 0) == -1);
}

TEST_CASE("a worker process that dies at start-up is reported - not waited for", "[engine][process]") {
  auto cfg = quickstart("configs/quickstart-2proc.yaml");
  EngineOptions o = test::engine_options();
  o.worker_executable = "/bin/false";  // exits at once with status 1
  auto engine = Engine::start(cfg, o);
  REQUIRE_FALSE(engine.ok());
  CHECK(engine.error().code == Errc::worker_failed);
  CHECK_THAT(engine.error().message, Catch::Matches("worker process replica/0/worker/0 \\(pid \\d+\\) exited with status 1"));
  CHECK(test::worker_processes_of(getpid()).empty());
  CHECK(test::worker_links_of(getpid()).empty());
}

TEST_CASE("a worker process that fails to load the model reports why and leaves no process", "[engine][process]") {
  test::TempDir tmp;
  auto cfg = quickstart("configs/quickstart-2proc.yaml");
  cfg.model.path = test::copy_stories(tmp.path());
  std::filesystem::resize_file(cfg.model.path / "model.safetensors", 5000);  // truncated
  auto engine = Engine::start(cfg, test::engine_options());
  REQUIRE_FALSE(engine.ok());
  CHECK(engine.error().code == Errc::parse_error);
  CHECK_THAT(engine.error().message, Catch::Contains("truncated safetensors file"));
  // Our worker child is reaped and its link unmapped before start() returns.
  CHECK(test::worker_processes_of(getpid()).empty());
  CHECK(test::worker_links_of(getpid()).empty());
}

TEST_CASE("a worker process killed mid-run: its request continues on the rebuilt replica, unchanged",
          "[engine][process][failure]") {
  auto engine = test::start_engine(quickstart("configs/quickstart-2proc.yaml"));
  auto clean = engine->generate({greedy({1}, 300)});
  REQUIRE(clean.ok());
  REQUIRE_FALSE((*clean)[0].error);
  // Kill our worker child as soon as the first text arrives, while the request still has hundreds of steps to go.
  bool killed = false;
  std::vector<pid_t> before;
  auto kill_children = [&](size_t, std::string_view) {
    if (!before.empty()) return;
    before = test::worker_processes_of(getpid());
    killed = before.size() == 1 && kill(before[0], SIGKILL) == 0;
  };
  auto out = engine->generate({greedy({1}, 300)}, kill_children);
  REQUIRE(out.ok());
  REQUIRE(killed);
  const auto& r = (*out)[0];
  INFO((r.error ? r.error->message : std::string("no error")));
  REQUIRE_FALSE(r.error);
  CHECK(r.generated_ids == (*clean)[0].generated_ids);  // recomputed from its tokens so far: nothing lost or repeated
  CHECK(r.text == (*clean)[0].text);
  // A new worker process serves the replica.
  const auto after = test::worker_processes_of(getpid());
  REQUIRE(after.size() == 1);
  CHECK(after[0] != before[0]);
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  REQUIRE(fleet->replicas.size() == 1);
  CHECK(fleet->replicas[0].state == "serving");
  CHECK(fleet->replicas[0].incarnation == 1);
  CHECK(fleet->replacements == 1);
  CHECK_THAT(fleet->replicas[0].last_failure, Catch::Contains("killed by signal 9"));
  auto again = engine->generate({greedy({1}, 4)});
  REQUIRE(again.ok());
  CHECK_FALSE((*again)[0].error);
  engine.reset();
  CHECK(test::worker_processes_of(getpid()).empty());
}

TEST_CASE("a stop string spanning tokens ends generation and is not emitted", "[engine][stop]") {
  auto engine = test::start_engine(quickstart());
  GenerateRequest r = greedy({1}, 100);
  r.stop = {"named Lily"};  // "named" and " Lily" are separate tokens of the reference story
  std::string streamed;
  auto out = engine->generate({r, greedy({1}, 20)}, [&](size_t i, std::string_view d) {
    if (i == 0) streamed += d;
  });
  REQUIRE(out.ok());
  CHECK((*out)[0].text == "Once upon a time, there was a little girl ");
  CHECK(streamed == (*out)[0].text);
  CHECK((*out)[0].finish_reason == "stop");
  CHECK((*out)[0].generated_ids.size() < 20);
  // The other request in the batch is unaffected, and the engine serves the next call.
  CHECK((*out)[1].generated_ids.size() == 20);
  auto again = engine->generate({greedy({1}, 5)});
  REQUIRE(again.ok());
  CHECK((*again)[0].generated_ids.size() == 5);
}

TEST_CASE("text with NUL characters travels whole between actors", "[engine]") {
  auto engine = test::start_engine(quickstart());
  const std::string text("a\0b", 3);
  auto ids = engine->tokenize(text);
  REQUIRE(ids.ok());
  // NUL is byte-fallback token <0x00> (id 3) in stories260K: both sides of it are encoded.
  CHECK(std::count(ids->begin(), ids->end(), 3) == 1);
  CHECK(ids->size() >= 4);
}

TEST_CASE("invalid UTF-8 in a prompt is encoded byte by byte and the engine keeps serving", "[engine][tokenizer]") {
  auto engine = test::start_engine(quickstart());
  GenerateRequest bad;
  bad.prompt = std::string("Once \xff\xfe upon", 12);
  bad.max_tokens = 4;
  bad.sampling.temperature = 0.0f;
  auto out = engine->generate({bad, greedy({1}, 4)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids.size() == 4);
  // Byte fallback: 0xFF and 0xFE are the tokens <0xFF> (258) and <0xFE> (257).
  const auto& ids = (*out)[0].prompt_ids;
  CHECK(std::find(ids.begin(), ids.end(), 258) != ids.end());
  CHECK(std::find(ids.begin(), ids.end(), 257) != ids.end());
  CHECK((*out)[1].generated_ids.size() == 4);
}

TEST_CASE("the scheduler leases part of the KV pool - grows it under load - gives the surplus back", "[engine][lease]") {
  auto engine = test::start_engine(quickstart("configs/quickstart.yaml", {"engine.kv_cache_memory=4MiB"}));
  REQUIRE(engine->generate({greedy({1}, 2)}).ok());  // the first lease is granted before the first step
  auto before = engine->stats();
  REQUIRE(before.ok());
  const uint64_t initial = before->lease_blocks;
  CHECK(initial > 0);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) requests.push_back(greedy({1}, 200));
  auto out = engine->generate(requests);
  REQUIRE(out.ok());
  const auto reference = test::reference_ids();
  for (const auto& g : *out) {
    REQUIRE_FALSE(g.error);
    CHECK(g.generated_ids == std::vector<int32_t>(reference.begin(), reference.begin() + 200));
  }
  auto after = engine->stats();
  REQUIRE(after.ok());
  CHECK(after->lease_grows > 0);
  CHECK(after->lease_returns > 0);
  CHECK(after->lease_blocks < initial * 2);  // back near its reserve once idle
}

namespace {

// The events of one submitted request, gathered until every sample finished.
struct Collected {
  std::mutex mutex;
  std::condition_variable done;
  std::vector<GenerateOutput> samples;
  size_t finished = 0;
  void add(const StreamEvent& e) {
    std::lock_guard lock(mutex);
    GenerateOutput& out = samples.at(e.sample_index);
    if (!e.finish_reason.empty()) CHECK(out.finish_reason.empty());  // one final event per sample
    out.add(e);
    if (e.finish_reason.empty()) return;
    if (++finished == samples.size()) done.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex);
    REQUIRE(done.wait_for(lock, std::chrono::seconds(60), [&] { return finished == samples.size(); }));
  }
};

}  // namespace

TEST_CASE("submit streams events that add up to what generate returns - cancel ends a request", "[engine]") {
  auto engine = test::start_engine(quickstart());
  GenerateRequest r;
  r.prompt = "Once upon a time";
  r.max_tokens = 40;
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 9;
  r.sampling.n = 2;
  r.stop = {"park"};
  auto expected = engine->generate({r});
  REQUIRE(expected.ok());
  Collected got;
  got.samples.resize(2);
  engine->submit(r, [&](const StreamEvent& e) { got.add(e); });
  got.wait();
  for (size_t s = 0; s < 2; ++s) {
    CHECK(got.samples[s].prompt_ids == (*expected)[s].prompt_ids);
    CHECK(got.samples[s].generated_ids == (*expected)[s].generated_ids);
    CHECK(got.samples[s].text == (*expected)[s].text);
    CHECK(got.samples[s].finish_reason == (*expected)[s].finish_reason);
  }
  CHECK(engine->num_in_flight() == 0);

  // A long request cancelled once its first tokens arrived.
  GenerateRequest endless;
  endless.prompt_ids = {1};
  endless.max_tokens = 400;
  endless.ignore_eos = true;
  endless.sampling.temperature = 0.0f;
  Collected cancelled;
  cancelled.samples.resize(1);
  std::atomic<uint64_t> id{0};
  std::atomic<bool> asked{false};
  id = engine->submit(endless, [&](const StreamEvent& e) {
    cancelled.add(e);
    if (id != 0 && !asked.exchange(true)) engine->cancel(id);  // id is set once submit returned
  });
  cancelled.wait();
  CHECK(cancelled.samples[0].finish_reason == "cancelled");
  CHECK(cancelled.samples[0].generated_ids.size() < 400);
  CHECK(engine->num_in_flight() == 0);
}
