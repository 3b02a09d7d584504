// The Llama forward pass on stories260K, without actors: logits at BOS and the 256-token greedy reference.
#include <catch2/catch.hpp>

#include "executors/cpu/thread_pool.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"

using namespace actord;

TEST_CASE("stories260K logits at BOS match the reference values", "[model]") {
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  auto model = ModelRegistry::with_builtins().create(*cfg, {test::stories_dir()});
  REQUIRE(model.ok());
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 4, 16);
  cpu::ThreadPool pool(2);
  std::vector<uint32_t> table{2};
  ForwardBatch batch;
  batch.tokens = {1};
  batch.seqs = {SeqSlice{0, 1, 0, table.data(), true}};
  std::vector<float> logits;
  (*model)->forward(batch, kv, logits, pool);
  REQUIRE(logits.size() == 512);
  // From models/stories260K/README.md (independent fp64 implementation).
  CHECK(logits[403] == Approx(17.023515).epsilon(1e-5));
  CHECK(logits[385] == Approx(15.406213).epsilon(1e-5));
  CHECK(logits[410] == Approx(13.108263).epsilon(1e-5));
}

TEST_CASE("greedy decoding reproduces the 256-token reference - prompt fed at once or token by token", "[model]") {
  auto cfg = ModelConfig::load(test::stories_dir());
  auto model = ModelRegistry::with_builtins().create(*cfg, {test::stories_dir()});
  REQUIRE(model.ok());
  const auto reference = test::reference_ids();
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 64, 8);
  cpu::ThreadPool pool(2);
  // Blocks in a scrambled order, to exercise the paging.
  std::vector<uint32_t> table;
  for (uint32_t i = 0; i < 40; ++i) table.push_back((i * 7 + 3) % 64);
  Sampler sampler;
  std::vector<float> logits;
  std::vector<int32_t> generated;
  int32_t next = 1;
  for (int pos = 0; pos < 256; ++pos) {
    ForwardBatch batch;
    batch.tokens = {next};
    batch.seqs = {SeqSlice{0, 1, pos, table.data(), true}};
    (*model)->forward(batch, kv, logits, pool);
    next = sampler.sample(logits.data(), cfg->vocab_size, SamplingOptions{0.0f, 1.0f, 0, 0}, pos);
    generated.push_back(next);
  }
  CHECK(generated == reference);

  // Prefill of BOS + the first 100 reference tokens in one step predicts reference token 101.
  std::vector<int32_t> prompt{1};
  prompt.insert(prompt.end(), reference.begin(), reference.begin() + 100);
  ForwardBatch batch;
  batch.tokens = prompt;
  batch.seqs = {SeqSlice{0, static_cast<int32_t>(prompt.size()), 0, table.data(), true}};
  (*model)->forward(batch, kv, logits, pool);
  CHECK(sampler.sample(logits.data(), cfg->vocab_size, SamplingOptions{0.0f, 1.0f, 0, 0}, 0) == reference[100]);
}

TEST_CASE("bad model folders give clear errors", "[model]") {
  test::TempDir tmp;
  auto missing = ModelConfig::load(tmp.path() / "nope");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == Errc::not_found);
  CHECK_THAT(missing.error().message, Catch::Contains("does not exist"));

  CHECK(ModelConfig::load(tmp.path()).error().message == (tmp.path() / "config.json").string() +
                                                             ": missing or unreadable");
  test::write_file(tmp.path() / "config.json", "{\"architectures\": [\"GPT2LMHeadModel\"], \"hidden_size\": 8}");
  CHECK_THAT(ModelConfig::load(tmp.path()).error().message, Catch::Contains("intermediate_size"));

  auto dir = test::copy_stories(tmp.path());
  std::ifstream in(dir / "config.json");
  auto j = nlohmann::json::parse(in);
  j["architectures"] = {"GPT2LMHeadModel"};
  test::write_file(dir / "config.json", j.dump());
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  auto model = ModelRegistry::with_builtins().create(*cfg, {dir});
  REQUIRE_FALSE(model.ok());
  CHECK(model.error().message == "architecture 'GPT2LMHeadModel' is not supported (known: LlamaForCausalLM, MistralForCausalLM, "
                                   "MixtralForCausalLM, Qwen2ForCausalLM)");
}

TEST_CASE("sampling - greedy ties - top-k 1 - seeded draws are reproducible", "[model]") {
  Sampler s;
  std::vector<float> logits{1.0f, 3.0f, 3.0f, -1.0f};
  CHECK(s.sample(logits.data(), 4, {0.0f, 1.0f, 0, 0}, 0) == 1);
  CHECK(s.sample(logits.data(), 4, {1.0f, 1.0f, 1, 5}, 0) == 1);
  std::vector<int32_t> a, b;
  for (uint32_t i = 0; i < 50; ++i) {
    a.push_back(s.sample(logits.data(), 4, {1.0f, 1.0f, 0, 42}, i));
    b.push_back(s.sample(logits.data(), 4, {1.0f, 1.0f, 0, 42}, i));
  }
  CHECK(a == b);
  // top-p 0.5 keeps only the two tied best tokens.
  for (uint32_t i = 0; i < 50; ++i) {
    const int32_t t = s.sample(logits.data(), 4, {1.0f, 0.5f, 0, 9}, i);
    CHECK((t == 1 || t == 2));
  }
}
