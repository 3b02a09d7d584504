// Running ahead (WorkerCore::step): a lone rank's greedy step is left pending, the next one queued behind it with
// the pending step's picks as previous_pick tokens, and the pending one answered after. The CPU backend runs ahead
// when ACTORD_CPU_RUN_AHEAD=1 is set as it is made (it gains nothing there: its steps are computed when queued), so
// the worker's side of it (pending steps, answers in step order, steps that cannot run ahead finishing the pending
// one first) runs here on every CI machine; on a GPU it is the default (tests/cuda_backend_test.cpp).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <vector>

#include "engine_test_util.hpp"

using namespace actord;

namespace {

// An engine whose CPU workers run ahead (or not); `set`: topology overrides (a worker process inherits the setting).
std::unique_ptr<Engine> engine_running_ahead(bool ahead, std::vector<std::string> set = {}) {
  if (ahead) setenv("ACTORD_CPU_RUN_AHEAD", "1", 1);
  auto engine = test::start_engine(test::quickstart("configs/quickstart.yaml", std::move(set)));
  unsetenv("ACTORD_CPU_RUN_AHEAD");
  return engine;
}

}  // namespace

TEST_CASE("a worker that runs ahead keeps every token - greedy prefixes alone, then with seeded draws among them",
          "[engine][run_ahead]") {
  auto ahead = engine_running_ahead(true);
  // Greedy only: every step runs ahead of the one before.
  const std::vector<GenerateRequest> prefixes = test::reference_prefix_requests();
  auto alone = ahead->generate(prefixes);
  REQUIRE(alone.ok());
  test::check_continues_reference(*alone, prefixes, prefixes.size());

  // Seeded draws with penalties among them (their steps cannot run ahead: the pending step is answered first) that
  // end early, so that later steps run ahead again; a request of two samples (a forking slice) too.
  std::vector<GenerateRequest> mixed = prefixes;
  for (int k = 0; k < 3; ++k) {
    GenerateRequest drawn;
    drawn.prompt_ids = {1, 403, 121, int32_t(30 + k)};
    drawn.max_tokens = uint32_t(6 + 5 * k);
    drawn.sampling.temperature = 0.9f;
    drawn.sampling.top_p = 0.95f;
    drawn.sampling.repetition_penalty = 1.2f;
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
  GenerateRequest drawn;
  drawn.prompt_ids = {1, 403, 121};
  drawn.max_tokens = 12;
  drawn.sampling.temperature = 0.9f;
  drawn.sampling.repetition_penalty = 1.2f;
  drawn.sampling.seed = 11;
  mixed.push_back(drawn);
  auto outputs = ahead->generate(mixed);
  REQUIRE(outputs.ok());
  test::check_continues_reference(*outputs, mixed, greedy);
  auto plain = engine_running_ahead(false);
  auto without = plain->generate({drawn});
  REQUIRE(without.ok());
  CHECK_FALSE((*outputs)[greedy].generated_ids.empty());
  CHECK((*outputs)[greedy].generated_ids == (*without)[0].generated_ids);
}
