// The prefix cache through the whole engine: requests sharing a long system prompt hit the cache (the counters
// say so) and give the same tokens as with the cache off, in one process and in two.
#include <catch2/catch.hpp>

#include "actors/engine.hpp"
#include "engine_test_util.hpp"

using namespace actord;

namespace {

std::vector<std::vector<int32_t>> run(const std::string& file, bool cache, EngineStats* stats) {
  auto engine = test::start_engine(
      test::quickstart(file, {std::string("engine.enable_prefix_caching=") + (cache ? "true" : "false")}));
  // A 100-token "system prompt" (the reference story) and a different question after it, in two waves: the
  // second wave finds the first wave's blocks cached.
  const auto story = test::reference_ids();
  std::vector<std::vector<int32_t>> outputs;
  for (int wave = 0; wave < 2; ++wave) {
    std::vector<GenerateRequest> requests;
    for (int i = 0; i < 6; ++i) {
      GenerateRequest r;
      r.prompt_ids = {1};
      r.prompt_ids.insert(r.prompt_ids.end(), story.begin(), story.begin() + 100);
      r.prompt_ids.push_back(story[static_cast<size_t>(120 + wave * 6 + i)]);
      r.max_tokens = 24;
      r.sampling.temperature = wave ? 0.7f : 0.0f;
      r.sampling.seed = static_cast<uint64_t>(i + 1);
      requests.push_back(r);
    }
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    for (const auto& g : *out) {
      REQUIRE_FALSE(g.error);
      outputs.push_back(g.generated_ids);
    }
  }
  *stats = *engine->stats();
  return outputs;
}

}  // namespace

TEST_CASE("a shared system prompt hits the prefix cache - outputs equal the cache off", "[engine][prefix_cache]") {
  for (const std::string file : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    EngineStats on, off;
    const auto cached = run(file, true, &on);
    const auto plain = run(file, false, &off);
    CHECK(cached == plain);
    CHECK(off.prefix_hit_blocks == 0);
    // 101 prompt tokens: 6 full 16-token blocks per request. The first request of wave 1 computes them (the rest
    // of that wave is admitted in the same step, before they are written); all of wave 2 hits.
    CHECK(on.prefix_hit_blocks >= 6 * 6);
    CHECK(on.prefix_query_blocks >= on.prefix_hit_blocks);
    CHECK(on.prefill_tokens < off.prefill_tokens);
    CHECK(on.prefix_cached_blocks > 0);
  }
}
