// Every built-in model family against the independent PyTorch reference (tests/reference/hf_reference.py, run
// with Debian's python3-torch): random-weight HF folders of several shapes, logits over a prompt and greedy decode
// steps. Relative error under 1e-4 in f32; greedy tokens identical. bf16 folders are compared against the same
// reference run on the bf16 weights (the engine keeps them in bf16 and computes in f32, as the reference does).
#include <catch2/catch.hpp>

#include "executors/cpu/thread_pool.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

struct EngineRun {
  std::vector<std::vector<float>> logits;  // row k predicts greedy[k]
  std::vector<int32_t> greedy;
};

// Prompt in one step, then one token per step, through the paged KV cache.
EngineRun run_engine(const std::filesystem::path& dir, const std::vector<int32_t>& prompt, size_t steps) {
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  auto model = ModelRegistry::with_builtins().create(*cfg, {dir});
  if (!model) FAIL(model.error().message);
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 8, 4);
  std::vector<uint32_t> table{5, 1, 7, 0, 3, 2, 6, 4};  // scattered blocks
  cpu::ThreadPool pool(2);
  Sampler sampler;
  EngineRun run;
  std::vector<int32_t> feed = prompt;
  int pos = 0;
  for (size_t k = 0; k < steps; ++k) {
    ForwardBatch batch;
    batch.tokens = feed;
    batch.seqs = {SeqSlice{0, static_cast<int32_t>(feed.size()), pos, table.data(), true}};
    std::vector<float> logits;
    (*model)->forward(batch, kv, logits, pool);
    pos += static_cast<int>(feed.size());
    run.logits.push_back(logits);
    run.greedy.push_back(sampler.sample(logits.data(), cfg->vocab_size, SamplingOptions{0.0f, 1.0f, 0, 0}, 0));
    feed = {run.greedy.back()};
  }
  return run;
}

void compare_suite(const std::string& dtype) {
  test::TempDir tmp;
  const std::string cmd = "/usr/bin/python3 " + (test::source_dir() / "tests/reference/hf_reference.py").string() +
                          " suite --out " + tmp.path().string() + " --dtype " + dtype + " > " +
                          (tmp.path() / "suite.log").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream log(tmp.path() / "suite.log");
    FAIL("the PyTorch reference failed (is python3-torch installed?): "
         << std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>()));
  }
  int kinds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    if (!entry.is_directory()) continue;
    ++kinds;
    std::ifstream in(entry.path() / "reference.json");
    const auto ref = nlohmann::json::parse(in);
    const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
    const auto ref_logits = ref.at("logits").get<std::vector<std::vector<float>>>();
    const auto ref_greedy = ref.at("greedy_ids").get<std::vector<int32_t>>();
    const EngineRun run = run_engine(entry.path(), prompt, ref_greedy.size());
    INFO("model " << entry.path().filename() << " dtype " << dtype);
    CHECK(run.greedy == ref_greedy);
    for (size_t k = 0; k < ref_logits.size(); ++k) {
      float max_ref = 0, max_err = 0;
      for (size_t v = 0; v < ref_logits[k].size(); ++v) {
        max_ref = std::max(max_ref, std::abs(ref_logits[k][v]));
        max_err = std::max(max_err, std::abs(run.logits[k][v] - ref_logits[k][v]));
      }
      INFO("row " << k << ": max abs error " << max_err << " of max |logit| " << max_ref);
      CHECK(max_err / max_ref < 1e-4f);
    }
  }
  CHECK(kinds >= 5);
}

}  // namespace

TEST_CASE("Llama - Mistral - Qwen2 and Mixtral in f32 match the PyTorch reference", "[reference][model]") {
  compare_suite("float32");
}

TEST_CASE("bf16 models keep their weights in bf16 and match the PyTorch reference on the same weights",
          "[reference][model]") {
  compare_suite("bfloat16");
}
