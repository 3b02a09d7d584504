// Per-request sampling through the whole engine (scheduler, step messages, worker state, sampler), checked against
// the model run directly with the sampler in a plain loop: penalties over the prompt and the output, min_tokens,
// logprobs, seeds; steps planned ahead give the same tokens as steps one at a time; bad options are refused.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "actors/engine.hpp"
#include "cpu_rank.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_registry.hpp"
#include "engine_test_util.hpp"

using namespace actord;

namespace {

GenerateRequest request(std::vector<int32_t> prompt, uint32_t max_tokens, SamplingOptions sampling) {
  GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.ignore_eos = true;
  return r;
}

// The model alone: prefill the prompt, then one token at a time, sampling with a history kept here.
struct DirectRun {
  std::vector<int32_t> generated;
  std::vector<std::vector<double>> log_softmax;  // [generated] the raw row's log-softmax, in double
};
std::unique_ptr<Model> stories_model(const ModelConfig& cfg, test::CpuRank& rank) {
  auto created = ModelRegistry::with_builtins().create(cfg, rank.load(test::stories_dir()));
  REQUIRE(created.ok());
  return std::move(*created);
}

// stories260K alone with a KV cache of 64 blocks of 16, the table 0, 1, ..., 63 for its one sequence.
struct DirectModel {
  ModelConfig cfg = *ModelConfig::load(test::stories_dir());
  test::CpuRank rank;
  std::unique_ptr<Model> model = stories_model(cfg, rank);
  KvCache kv{cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, 64, 16};
  std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(64);
    for (uint32_t i = 0; i < 64; ++i) t[i] = i;
    return t;
  }();
};

// A row of logits as log-probabilities, in double.
std::vector<double> log_softmax(const std::vector<float>& logits) {
  double max = logits[0], sum = 0;
  for (float l : logits) max = std::max<double>(max, l);
  for (float l : logits) sum += std::exp(double(l) - max);
  std::vector<double> row(logits.size());
  for (size_t v = 0; v < logits.size(); ++v) row[v] = double(logits[v]) - max - std::log(sum);
  return row;
}

DirectRun run_directly(const std::vector<int32_t>& prompt, uint32_t max_tokens, const SamplingOptions& options) {
  DirectModel direct;
  auto& [cfg, rank, model, kv, table] = direct;
  const int vocab = cfg.vocab_size;
  Sampler sampler;
  PenaltyHistory history;
  history.add_prompt(prompt);
  DirectRun run;
  std::vector<float> logits;
  ForwardBatch batch;
  batch.tokens = prompt;
  batch.seqs = {SeqSlice{0, static_cast<int32_t>(prompt.size()), 0, table.data(), true}};
  int pos = static_cast<int>(prompt.size());
  for (uint32_t i = 0; i < max_tokens; ++i) {
    REQUIRE(model->forward(batch, kv, logits, rank.backend));
    run.log_softmax.push_back(log_softmax(logits));
    SampleRequest req;
    req.options = &options;
    req.sample_index = i;
    if (options.has_penalties()) req.history = &history;
    const int32_t next = sampler.sample(logits.data(), vocab, req).token;
    run.generated.push_back(next);
    history.add_output(next);
    batch.tokens = {next};
    batch.seqs = {SeqSlice{0, 1, pos++, table.data(), true}};
  }
  return run;
}

std::vector<int32_t> prompt_of(size_t n) {
  std::vector<int32_t> p{1};
  const auto ref = test::reference_ids();
  p.insert(p.end(), ref.begin(), ref.begin() + static_cast<long>(n - 1));
  return p;
}

}  // namespace

TEST_CASE("penalties over prompt and output match the model run directly - greedy and seeded", "[engine][sampling]") {
  // Small token budget: the prompt arrives in chunks; the steps are planned ahead (placeholders for the tokens).
  auto engine = test::start_engine(test::quickstart("configs/quickstart.yaml", {"engine.max_num_batched_tokens=8"}));
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  greedy.repetition_penalty = 1.3f;
  greedy.frequency_penalty = 0.4f;
  greedy.presence_penalty = 0.2f;
  SamplingOptions seeded = greedy;
  seeded.temperature = 0.8f;
  seeded.top_p = 0.9f;
  seeded.seed = 7;
  const auto prompt = prompt_of(20);
  auto out = engine->generate({request(prompt, 40, greedy), request(prompt, 40, seeded)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  REQUIRE_FALSE((*out)[1].error);
  CHECK((*out)[0].generated_ids == run_directly(prompt, 40, greedy).generated);
  CHECK((*out)[1].generated_ids == run_directly(prompt, 40, seeded).generated);
  // Again: the prompt's full blocks now come from the prefix cache, and the worker gets their tokens as context.
  auto again = engine->generate({request(prompt, 40, greedy)});
  REQUIRE(again.ok());
  CHECK((*again)[0].generated_ids == (*out)[0].generated_ids);
  CHECK(engine->stats()->prefix_hit_blocks > 0);
  // And the penalties do something: without them greedy follows the reference story.
  SamplingOptions plain;
  plain.temperature = 0.0f;
  CHECK((*out)[0].generated_ids != run_directly(prompt, 40, plain).generated);
}

TEST_CASE("logprobs are the raw log-softmax of the model - top-N best first", "[engine][sampling]") {
  auto engine = test::start_engine(test::quickstart());
  SamplingOptions o;
  o.temperature = 0.0f;
  o.logprobs = 5;
  const auto prompt = prompt_of(4);
  auto out = engine->generate({request(prompt, 12, o)});
  REQUIRE(out.ok());
  const GenerateOutput& g = (*out)[0];
  REQUIRE_FALSE(g.error);
  const DirectRun direct = run_directly(prompt, 12, o);
  REQUIRE(g.generated_ids == direct.generated);
  REQUIRE(g.logprobs.size() == g.generated_ids.size());
  for (size_t i = 0; i < g.logprobs.size(); ++i) {
    const TokenLogprobs& lp = g.logprobs[i];
    REQUIRE(lp.top_ids.size() == 5);
    CHECK(lp.top_ids[0] == g.generated_ids[i]);  // greedy: the sampled token is the best one
    CHECK(lp.logprob == Approx(direct.log_softmax[i][g.generated_ids[i]]).margin(1e-4));
    for (size_t k = 0; k < 5; ++k) {
      CHECK(lp.top_logprobs[k] == Approx(direct.log_softmax[i][lp.top_ids[k]]).margin(1e-4));
      if (k > 0) CHECK(lp.top_logprobs[k] <= lp.top_logprobs[k - 1]);
    }
  }
}

TEST_CASE("min_tokens keeps the end-of-sequence token away until enough tokens were generated", "[engine][sampling]") {
  auto engine = test::start_engine(test::quickstart());
  // Find a seeded story that ends on its own (end-of-sequence) early.
  SamplingOptions o;
  o.temperature = 1.0f;
  std::optional<std::pair<uint64_t, size_t>> ending;  // seed, tokens
  for (uint64_t seed = 1; seed <= 64 && !ending; ++seed) {
    o.seed = seed;
    GenerateRequest r = request({1}, 200, o);
    r.ignore_eos = false;
    auto out = engine->generate({r});
    REQUIRE(out.ok());
    if ((*out)[0].finish_reason == "stop" && (*out)[0].generated_ids.size() < 150)
      ending = std::make_pair(seed, (*out)[0].generated_ids.size());
  }
  REQUIRE(ending);
  o.seed = ending->first;
  o.min_tokens = static_cast<uint32_t>(ending->second + 20);
  GenerateRequest r = request({1}, 400, o);
  r.ignore_eos = false;
  auto out = engine->generate({r});
  REQUIRE(out.ok());
  CHECK((*out)[0].generated_ids.size() >= o.min_tokens);
}

TEST_CASE("steps planned ahead give the same tokens as steps one at a time", "[engine][sampling]") {
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    SamplingOptions o;
    o.temperature = i % 2 ? 0.9f : 0.0f;
    o.seed = 100 + static_cast<uint64_t>(i);
    o.top_k = i % 3 == 0 ? 0 : 40;
    requests.push_back(request(prompt_of(3 + static_cast<size_t>(i) * 7), 30 + static_cast<uint32_t>(i) * 9, o));
  }
  std::vector<std::vector<int32_t>> outputs[2];
  uint64_t ahead[2] = {0, 0};
  for (int plan_ahead = 0; plan_ahead < 2; ++plan_ahead) {
    auto engine = test::start_engine(
        test::quickstart("configs/quickstart.yaml", {std::string("scheduler.plan_ahead=") +
                                                         (plan_ahead ? "true" : "false"),
                                                     "engine.max_num_batched_tokens=16"}));
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    for (const auto& g : *out) {
      REQUIRE_FALSE(g.error);
      outputs[plan_ahead].push_back(g.generated_ids);
    }
    ahead[plan_ahead] = engine->stats()->steps_planned_ahead;
  }
  CHECK(outputs[0] == outputs[1]);
  CHECK(ahead[0] == 0);
  CHECK(ahead[1] > 0);
}

TEST_CASE("different seeds give different texts at temperature 1 - the same seed the same text", "[engine][sampling]") {
  auto engine = test::start_engine(test::quickstart());
  std::vector<GenerateRequest> requests;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    SamplingOptions o;
    o.temperature = 1.0f;
    o.seed = seed;
    requests.push_back(request(prompt_of(4), 24, o));
  }
  requests.push_back(requests[2]);  // seed 3 again, in the same batch
  auto out = engine->generate(requests);
  REQUIRE(out.ok());
  std::set<std::string> texts;
  for (size_t i = 0; i < 8; ++i) {
    REQUIRE_FALSE((*out)[i].error);
    texts.insert((*out)[i].text);
  }
  CHECK(texts.size() == 8);  // 24 tokens at temperature 1: no two seeds write the same text
  CHECK((*out)[8].text == (*out)[2].text);
  // At temperature 0 the seed does not matter.
  for (auto& r : requests) r.sampling.temperature = 0.0f;
  auto greedy = engine->generate({requests[0], requests[1]});
  REQUIRE(greedy.ok());
  CHECK((*greedy)[0].text == (*greedy)[1].text);
}

TEST_CASE("bad sampling options are refused with the field named - the engine keeps serving", "[engine][sampling]") {
  auto engine = test::start_engine(test::quickstart());
  auto bad = [&](auto edit) {
    SamplingOptions o;
    o.temperature = 0.0f;
    edit(o);
    auto out = engine->generate({request({1}, 4, o)});
    REQUIRE(out.ok());
    REQUIRE((*out)[0].error);
    CHECK((*out)[0].error->code == Errc::invalid_argument);
    return (*out)[0].error->message;
  };
  CHECK(bad([](SamplingOptions& o) { o.top_p = 0.0f; }) == "top_p: must be in (0, 1], got 0");
  CHECK(bad([](SamplingOptions& o) { o.top_p = 1.5f; }) == "top_p: must be in (0, 1], got 1.5");
  CHECK(bad([](SamplingOptions& o) { o.temperature = -0.5f; }) == "temperature: must be finite and >= 0, got -0.5");
  CHECK(bad([](SamplingOptions& o) { o.temperature = NAN; }) == "temperature: must be finite and >= 0, got nan");
  CHECK(bad([](SamplingOptions& o) { o.top_k = 513; }) == "top_k: must be at most the vocabulary size (512), got 513");
  CHECK(bad([](SamplingOptions& o) { o.logprobs = 21; }) == "logprobs: must be at most 20 (or -1 for none), got 21");
  CHECK(bad([](SamplingOptions& o) { o.n = 0; }) == "n: must be in [1, 128], got 0");
  CHECK(bad([](SamplingOptions& o) { o.prompt_logprobs = 21; }) ==
        "prompt_logprobs: must be at most 20 (or -1 for none), got 21");
  CHECK(bad([](SamplingOptions& o) { o.n = 129; }) == "n: must be in [1, 128], got 129");
  CHECK(bad([](SamplingOptions& o) { o.logit_bias = {{512, 1.0f}}; }) ==
        "logit_bias: must be keyed by token ids in [0, 511], got 512");
  CHECK(bad([](SamplingOptions& o) { o.logit_bias = {{5, -101.0f}}; }) ==
        "logit_bias: must be biases in [-100, 100], got -101");
  CHECK(bad([](SamplingOptions& o) { o.n = 100; }) ==
        "n: must be at most engine.max_num_seqs (64): the samples run together, got 100");
  SamplingOptions ok;
  ok.temperature = 0.0f;
  auto out = engine->generate({request({1}, 8, ok)});
  REQUIRE(out.ok());
  CHECK_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids.size() == 8);
}

TEST_CASE("two processes - penalties and logprobs cross the process boundary", "[engine][sampling][process]") {
  auto engine = test::start_engine(test::quickstart("configs/quickstart-2proc.yaml"));
  SamplingOptions o;
  o.temperature = 0.0f;
  o.repetition_penalty = 1.2f;
  o.logprobs = 2;
  const auto prompt = prompt_of(10);
  auto out = engine->generate({request(prompt, 24, o)});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  CHECK((*out)[0].generated_ids == run_directly(prompt, 24, o).generated);
  CHECK((*out)[0].logprobs.size() == 24);
}

namespace {

// Logit biases through the engine (scheduler, step messages, worker) give what the model run directly with the
// sampler gives: a banned token never comes, a token biased by +100 every time, and a small bias moves greedy and
// seeded tokens as the sampler says.
void check_logit_biases(Engine& engine) {
  const auto prompt = prompt_of(12);
  SamplingOptions plain;
  plain.temperature = 0.0f;
  const std::vector<int32_t> unbiased = run_directly(prompt, 24, plain).generated;
  SamplingOptions banned = plain;  // the first two greedy tokens banned
  banned.logit_bias = {{std::min(unbiased[0], unbiased[1]), -100.0f}, {std::max(unbiased[0], unbiased[1]), -100.0f}};
  REQUIRE(unbiased[0] != unbiased[1]);
  SamplingOptions forced = plain;
  forced.logit_bias = {{300, 100.0f}};
  SamplingOptions nudged = plain;
  nudged.temperature = 0.9f;
  nudged.seed = 5;
  nudged.repetition_penalty = 1.1f;
  nudged.logit_bias = {{unbiased[2], 1.5f}, {400, 3.0f}};
  nudged.logprobs = 1;
  auto out = engine.generate({request(prompt, 24, banned), request(prompt, 24, forced), request(prompt, 24, nudged)});
  REQUIRE(out.ok());
  for (const GenerateOutput& o : *out) REQUIRE_FALSE(o.error);
  const auto& ban = (*out)[0].generated_ids;
  CHECK(std::count(ban.begin(), ban.end(), unbiased[0]) == 0);
  CHECK(std::count(ban.begin(), ban.end(), unbiased[1]) == 0);
  CHECK(ban == run_directly(prompt, 24, banned).generated);
  CHECK((*out)[1].generated_ids == std::vector<int32_t>(24, 300));
  CHECK((*out)[2].generated_ids == run_directly(prompt, 24, nudged).generated);
  // Logprobs stay those of the raw row: the model's, not the biased one's.
  const DirectRun direct = run_directly(prompt, 24, nudged);
  REQUIRE((*out)[2].logprobs.size() == 24);
  for (size_t i = 0; i < 24; ++i)
    CHECK((*out)[2].logprobs[i].logprob == Approx(direct.log_softmax[i][size_t(direct.generated[i])]).margin(1e-4));
}

}  // namespace

TEST_CASE("logit biases steer tokens as the sampler says - in one process and across two", "[engine][sampling]") {
  SECTION("one process") {
    auto engine = test::start_engine(test::quickstart());
    check_logit_biases(*engine);
  }
  SECTION("the worker in its own process") {
    auto engine = test::start_engine(test::quickstart("configs/quickstart-2proc.yaml"));
    check_logit_biases(*engine);
  }
}

namespace {

// A request of n samples equals n requests of one sample with seeds seed + i, each run alone; the prompt's
// prefill is computed once.
void check_samples_equal_separate_runs(Engine& engine) {
  SamplingOptions o;
  o.temperature = 0.8f;
  o.top_p = 0.95f;
  o.seed = 1234;
  o.repetition_penalty = 1.1f;  // the forks' worker state starts from the prompt's history
  o.logprobs = 1;
  o.n = 4;
  const auto prompt = prompt_of(21);  // one full block of 16 and a partial one: copied on write
  const auto before = engine.stats();
  auto out = engine.generate({request(prompt, 30, o)});
  REQUIRE(out.ok());
  REQUIRE(out->size() == 4);
  const auto during = stats_between(*before, *engine.stats());
  CHECK(during.prefill_tokens == prompt.size());  // once, not four times
  std::set<std::vector<int32_t>> distinct;
  for (uint32_t i = 0; i < 4; ++i) {
    INFO("sample " << i);
    const GenerateOutput& sample = (*out)[i];
    REQUIRE_FALSE(sample.error);
    CHECK(sample.request_index == 0);
    CHECK(sample.sample_index == i);
    CHECK(sample.prompt_ids == prompt);
    CHECK(sample.generated_ids == run_directly(prompt, 30, o.for_sample(i)).generated);
    CHECK(sample.logprobs.size() == 30);
    distinct.insert(sample.generated_ids);
  }
  CHECK(distinct.size() == 4);
}

}  // namespace

TEST_CASE("n samples share the prompt's KV and equal n requests seeded seed + i run alone", "[engine][sampling][fork]") {
  auto engine = test::start_engine(test::quickstart());
  check_samples_equal_separate_runs(*engine);
  // Mixed with requests of one sample, greedy n = 3 gives three equal outputs.
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  greedy.n = 3;
  SamplingOptions one;
  one.temperature = 0.0f;
  auto out = engine->generate({request(prompt_of(5), 12, one), request(prompt_of(9), 12, greedy),
                               request(prompt_of(7), 12, one)});
  REQUIRE(out.ok());
  REQUIRE(out->size() == 5);
  CHECK((*out)[0].request_index == 0);
  CHECK((*out)[3].request_index == 1);
  CHECK((*out)[4].request_index == 2);
  for (size_t i = 1; i <= 3; ++i) CHECK((*out)[i].generated_ids == run_directly(prompt_of(9), 12, one).generated);
  CHECK((*out)[4].generated_ids == run_directly(prompt_of(7), 12, one).generated);
}

TEST_CASE("two processes - n samples fork in the worker process", "[engine][sampling][fork][process]") {
  auto engine = test::start_engine(test::quickstart("configs/quickstart-2proc.yaml"));
  check_samples_equal_separate_runs(*engine);
}

namespace {

// The model alone, one prompt token per step: row p - 1's raw log-softmax, for each prompt position p >= 1.
std::vector<std::vector<double>> prompt_rows_directly(const std::vector<int32_t>& prompt) {
  DirectModel direct;
  std::vector<std::vector<double>> rows;
  std::vector<float> logits;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    ForwardBatch batch;
    batch.tokens = {prompt[p]};
    batch.seqs = {SeqSlice{0, 1, static_cast<int32_t>(p), direct.table.data(), true}};
    REQUIRE(direct.model->forward(batch, direct.kv, logits, direct.rank.backend));
    rows.push_back(log_softmax(logits));
  }
  return rows;
}

void check_prompt_logprobs(const GenerateOutput& out, const std::vector<std::vector<double>>& rows, int top_n) {
  const auto& prompt = out.prompt_ids;
  REQUIRE(out.prompt_logprobs.size() == prompt.size() - 1);
  for (size_t p = 1; p < prompt.size(); ++p) {
    INFO("prompt position " << p);
    const TokenLogprobs& lp = out.prompt_logprobs[p - 1];
    const auto& row = rows[p - 1];
    CHECK(lp.logprob == Approx(row[prompt[p]]).margin(1e-4));
    REQUIRE(lp.top_ids.size() == static_cast<size_t>(top_n));
    for (int k = 0; k < top_n; ++k) {
      CHECK(lp.top_logprobs[k] == Approx(row[lp.top_ids[k]]).margin(1e-4));
      if (k > 0) CHECK(lp.top_logprobs[k] <= lp.top_logprobs[k - 1]);
    }
    if (top_n > 0) CHECK(lp.top_logprobs[0] == Approx(*std::max_element(row.begin(), row.end())).margin(1e-4));
  }
}

}  // namespace

TEST_CASE("prompt logprobs are the model's log-softmax of each prompt token - chunked, cached, forked, 2 processes",
          "[engine][sampling][prompt_logprobs]") {
  const auto prompt = prompt_of(37);  // chunks of 8: rows whose next prompt token is in the next chunk
  const auto rows = prompt_rows_directly(prompt);
  for (const char* config : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    INFO(config);
    auto engine = test::start_engine(test::quickstart(config, {"engine.max_num_batched_tokens=8"}));
    SamplingOptions o;
    o.temperature = 0.0f;
    o.prompt_logprobs = 3;
    o.n = 2;
    const auto before = engine->stats();
    auto out = engine->generate({request(prompt, 5, o)});
    REQUIRE(out.ok());
    REQUIRE(out->size() == 2);
    // Chunked: 37 prompt tokens in 5 steps of at most 8, computed once for both samples, then 4 decode steps.
    const EngineStats run = stats_between(*before, *engine->stats());
    CHECK(run.prefill_tokens == prompt.size());
    CHECK(run.steps >= 5 + 4);
    for (const auto& sample : *out) {
      REQUIRE_FALSE(sample.error);
      check_prompt_logprobs(sample, rows, 3);
    }
    // Again: the prompt's blocks are cached now, but a request with prompt logprobs computes every row.
    o.n = 1;
    o.prompt_logprobs = 0;
    auto again = engine->generate({request(prompt, 5, o)});
    REQUIRE(again.ok());
    check_prompt_logprobs((*again)[0], rows, 0);
    CHECK((*again)[0].generated_ids == (*out)[0].generated_ids);
    // Without them, no prompt logprobs.
    o.prompt_logprobs = -1;
    auto none = engine->generate({request(prompt, 5, o)});
    REQUIRE(none.ok());
    CHECK((*none)[0].prompt_logprobs.empty());
  }
}
