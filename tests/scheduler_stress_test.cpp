// 500 requests of random prompt and output lengths against stories260K with a KV pool far too small for them,
// under FCFS and priority, preempting by recompute and by swap: every request completes, each output equals the
// same request run alone (greedy, and seeded at temperature 0.8; some of n = 2 or 3 samples, each equal to one
// sample seeded seed + i run alone), preemptions happened, and afterwards no block is held (nothing leaked).
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>

#include "actors/engine.hpp"
#include "engine_test_util.hpp"

using namespace actord;

namespace {

std::unique_ptr<Engine> start(std::vector<std::string> set) {
  return test::start_engine(test::quickstart("configs/quickstart.yaml", std::move(set)));
}

std::vector<GenerateRequest> random_requests(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(3, 511);
  std::uniform_int_distribution<int> prompt_len(1, 60), output_len(1, 48), priority(0, 3);
  std::vector<GenerateRequest> requests(n);
  for (size_t i = 0; i < n; ++i) {
    GenerateRequest& r = requests[i];
    r.prompt_ids.push_back(1);
    for (int t = prompt_len(rng); t > 1; --t) r.prompt_ids.push_back(token(rng));
    r.max_tokens = static_cast<uint32_t>(output_len(rng));
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.seed = 1000 + i;
    r.priority = priority(rng);
    r.ignore_eos = i % 3 == 0;
    if (i % 10 == 3) r.sampling.n = 2 + static_cast<uint32_t>(i % 20 == 3);  // forks share the prompt's KV
    if (i % 10 == 5) r.sampling.prompt_logprobs = 1;  // every prompt row, reported once despite preemptions
  }
  return requests;
}

}  // namespace

TEST_CASE("stress - 500 requests through a KV pool far too small - all complete and equal their solo runs",
          "[engine][stress]") {
  const auto requests = random_requests(500, 42);
  // Solo: one at a time, with plenty of KV and no prefix cache; sample i of a request alone, seeded seed + i.
  std::vector<std::vector<int32_t>> solo;  // one per output
  std::vector<std::vector<TokenLogprobs>> solo_prompt_logprobs;
  {
    auto engine = start({"engine.enable_prefix_caching=false"});
    for (const auto& r : requests) {
      for (uint32_t sample = 0; sample < r.sampling.n; ++sample) {
        GenerateRequest one = r;
        one.sampling = r.sampling.for_sample(sample);
        auto out = engine->generate({one});
        REQUIRE(out.ok());
        REQUIRE_FALSE((*out)[0].error);
        solo.push_back((*out)[0].generated_ids);
        solo_prompt_logprobs.push_back((*out)[0].prompt_logprobs);
      }
    }
  }
  // 160 KiB of KV: 8 blocks of 16 tokens (stories260K: 20 KiB a block), for 500 requests of up to 108 tokens.
  for (const std::string mode : {"recompute", "swap"})
  for (const std::string policy : {"fcfs", "priority"}) {
    INFO("policy " << policy << ", preemption by " << mode);
    // Swap space for 5 blocks: sequences that hold more are recomputed, the others swapped.
    auto engine = start({"engine.kv_cache_memory=160KiB", "engine.max_num_seqs=32", "scheduler.policy=" + policy,
                         "engine.preemption_mode=" + mode, "engine.swap_space=100KiB"});
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    REQUIRE(out->size() == solo.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < out->size(); ++i) {
      REQUIRE_FALSE((*out)[i].error);
      CHECK(((*out)[i].finish_reason == "stop" || (*out)[i].finish_reason == "length"));
      if ((*out)[i].generated_ids != solo[i]) ++mismatches;
      const auto& prompt_logprobs = (*out)[i].prompt_logprobs;
      REQUIRE(prompt_logprobs.size() == solo_prompt_logprobs[i].size());
      for (size_t p = 0; p < prompt_logprobs.size(); ++p) {
        if (prompt_logprobs[p].top_ids != solo_prompt_logprobs[i][p].top_ids ||
            std::abs(prompt_logprobs[p].logprob - solo_prompt_logprobs[i][p].logprob) > 1e-4f)
          ++mismatches;
      }
    }
    CHECK(mismatches == 0);
    auto stats = engine->stats();
    REQUIRE(stats.ok());
    INFO(stats->preemptions << " preemptions, " << stats->swap_outs << " swap-outs, at most " << stats->max_seqs_in_step
                            << " sequences in one of " << stats->steps << " steps");
    CHECK(stats->preemptions > 0);
    // The pool is tiny, but requests still ran together: fewer steps than one request after the other would
    // take (each at least as many as its longest sample's tokens; a request's samples share steps anyway).
    std::map<size_t, uint64_t> longest;  // request index -> tokens of its longest sample
    for (const auto& g : *out)
      longest[g.request_index] = std::max<uint64_t>(longest[g.request_index], g.generated_ids.size());
    uint64_t serial_steps = 0;
    for (const auto& [request, tokens] : longest) serial_steps += tokens;
    INFO("one request at a time would take at least " << serial_steps << " steps");
    CHECK(stats->max_seqs_in_step > 1);
    CHECK(stats->steps < serial_steps);
    if (mode == "swap") {
      CHECK(stats->swap_outs > 0);
      CHECK(stats->swap_ins == stats->swap_outs);
    } else {
      CHECK(stats->swap_outs == 0);
    }
    CHECK(stats->swapped_blocks == 0);
    // No leak: once idle, every block is free or cached-and-evictable; the whole pool fits one request again.
    GenerateRequest big;
    big.prompt_ids = {1};
    big.max_tokens = 8 * 16 - 1;
    big.ignore_eos = true;
    big.sampling.temperature = 0.0f;
    auto last = engine->generate({big});
    REQUIRE(last.ok());
    REQUIRE_FALSE((*last)[0].error);
    CHECK((*last)[0].generated_ids.size() == 8 * 16 - 1);
  }
}

