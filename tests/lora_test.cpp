// LoRA adapters (plugins/lora_adapter.hpp, lora.modules): the transformer with an adapter against the independent
// PyTorch reference applying PEFT's unmerged LoRA (tests/reference/hf_reference.py make-lora, logits --lora) on
// several families; several adapters and the base model in one batch, each sequence equal to its run alone; the
// prefix cache keeping adapters' KV apart; TP, PP and worker processes equal to one worker; bad adapters and
// requests refused by name with the engine still serving.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/engine.hpp"
#include "cpu_rank.hpp"
#include "engine_test_util.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/lora_adapter.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

const std::filesystem::path kReference = test::source_dir() / "tests/reference/hf_reference.py";

void python(const std::string& args, const std::filesystem::path& log) {
  const std::string cmd = "/usr/bin/python3 " + kReference.string() + " " + args + " > " + log.string() + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(log);
    FAIL("hf_reference.py " << args << " failed: "
                            << std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  }
}

struct Reference {
  std::vector<std::vector<float>> logits;  // row k predicts greedy[k]
  std::vector<int32_t> greedy;
};

Reference reference(const std::filesystem::path& dir, const std::filesystem::path& adapter,
                    const std::vector<int32_t>& prompt, int steps, const std::filesystem::path& out) {
  std::string ids;
  for (int32_t id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  python("logits --model " + dir.string() + (adapter.empty() ? "" : " --lora " + adapter.string()) +
             " --prompt-ids " + ids + " --decode-steps " + std::to_string(steps) + " --out " + out.string(),
         out.string() + ".log");
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  return {j.at("logits").get<std::vector<std::vector<float>>>(), j.at("greedy_ids").get<std::vector<int32_t>>()};
}

// Largest |a - b| over the row's largest |b|.
float relative_error(const float* a, const std::vector<float>& b) {
  float max_ref = 0, max_err = 0;
  for (size_t v = 0; v < b.size(); ++v) {
    max_ref = std::max(max_ref, std::abs(b[v]));
    max_err = std::max(max_err, std::abs(a[v] - b[v]));
  }
  return max_err / max_ref;
}

// A model folder of `kind` with adapters: one per entry of `targets` (make-lora --targets), seeds 1, 2, ...
struct Folder {
  test::TempDir tmp;
  std::filesystem::path model;
  std::vector<std::filesystem::path> adapters;
  Folder(const std::string& kind, const std::vector<std::string>& targets, int rank = 8) {
    model = tmp.path() / kind;
    python("make-model --kind " + kind + " --out " + model.string(), tmp.path() / "make.log");
    for (size_t i = 0; i < targets.size(); ++i) {
      adapters.push_back(tmp.path() / ("adapter" + std::to_string(i + 1)));
      python("make-lora --model " + model.string() + " --out " + adapters.back().string() + " --rank " +
                 std::to_string(rank) + " --seed " + std::to_string(i + 1) +
                 (targets[i].empty() ? "" : " --targets " + targets[i]),
             tmp.path() / "lora.log");
    }
  }
  // --set lines declaring the adapters as a1, a2, ...
  std::vector<std::string> set() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < adapters.size(); ++i)
      out.push_back("lora.modules.a" + std::to_string(i + 1) + "=" + adapters[i].string());
    return out;
  }
};

const std::string kAll = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";

// Greedy requests for the engine, on adapter `lora`.
GenerateRequest greedy(std::vector<int32_t> prompt, uint32_t max_tokens, uint32_t lora) {
  GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.sampling.logprobs = 0;
  r.lora = lora;
  return r;
}

std::vector<GenerateOutput> generate(Engine& engine, const std::vector<GenerateRequest>& requests) {
  auto out = engine.generate(requests);
  REQUIRE(out.ok());
  for (const auto& o : *out) {
    if (o.error) FAIL(o.error->message);
  }
  return *out;
}

}  // namespace

TEST_CASE("LoRA adapters match the PyTorch reference of PEFT's unmerged LoRA - base and adapter rows in one batch",
          "[lora][reference][model]") {
  // Families with what sets them apart for LoRA: biases (qwen2), q/k norms and tied embeddings (qwen3), GELU
  // without a fused gate/up and sandwich norms (gemma3), experts (attention adapters only on mixtral; qwen3-moe's
  // dense layer takes MLP adapters too), Phi-3 (its adapters name the fused qkv_proj and gate_up_proj).
  for (const auto& [kind, targets] : std::vector<std::pair<std::string, std::string>>{
           {"llama-gqa", kAll}, {"qwen2-bias", kAll}, {"qwen3", "q_proj,v_proj,down_proj"}, {"gemma3", kAll},
           {"mixtral-4x2", "q_proj,k_proj,v_proj,o_proj"}, {"qwen3-moe", kAll},
           {"phi3", "qkv_proj,o_proj,gate_up_proj,down_proj"}}) {  // Phi-3's fused modules: A shared, B's rows split
    INFO("model " << kind << ", adapter on " << targets);
    Folder f(kind, {targets});
    const std::vector<int32_t> prompt{1, 42, 7, 300, 15, 99};
    const int steps = 6;
    const Reference base = reference(f.model, {}, prompt, steps, f.tmp.path() / "base.json");
    const Reference adapted = reference(f.model, f.adapters[0], prompt, steps, f.tmp.path() / "lora.json");
    CHECK(adapted.greedy != base.greedy);  // the adapter changes what the model says

    auto cfg = ModelConfig::load(f.model);
    REQUIRE(cfg.ok());
    auto adapter = LoraAdapter::open({"a1", f.adapters[0]}, *cfg, 64);
    REQUIRE(adapter.ok());
    test::CpuRank rank(2, cpu::Isa::avx2);  // f32 products: the reference's arithmetic, no bf16 rounding
    ModelLoadOptions options = rank.load(f.model);
    options.lora = {*adapter};
    auto model = ModelRegistry::with_builtins().create(*cfg, options);
    if (!model) FAIL(model.error().message);
    CHECK((*model)->num_lora_adapters() == 1);
    KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 16, 4, DType::f32);
    const std::vector<uint32_t> tables[2] = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
    // Sequence 0 on the base model, sequence 1 on the adapter, in the same steps: the adapter's rows gathered and
    // scattered back; then the adapter alone (every row: no gathering) must give the same logits.
    std::vector<int32_t> feed[2] = {prompt, prompt};
    int pos = 0;
    for (int k = 0; k < steps; ++k) {
      ForwardBatch batch;
      for (int s = 0; s < 2; ++s) {
        batch.seqs.push_back(SeqSlice{static_cast<int32_t>(batch.tokens.size()), static_cast<int32_t>(feed[s].size()),
                                      pos, tables[s].data(), 1, s});
        batch.tokens.insert(batch.tokens.end(), feed[s].begin(), feed[s].end());
      }
      std::vector<float> logits;
      REQUIRE((*model)->forward(batch, kv, logits, rank.backend));
      const size_t vocab = static_cast<size_t>(cfg->vocab_size);
      REQUIRE(logits.size() == 2 * vocab);
      INFO("step " << k);
      CHECK(relative_error(logits.data(), base.logits[size_t(k)]) < 1e-4f);
      CHECK(relative_error(logits.data() + vocab, adapted.logits[size_t(k)]) < 1e-4f);
      pos += static_cast<int>(feed[0].size());
      feed[0] = {base.greedy[size_t(k)]};
      feed[1] = {adapted.greedy[size_t(k)]};
    }
  }
}

TEST_CASE("LoRA - two adapters and the base model batched together each equal their run alone and the reference",
          "[lora][engine]") {
  Folder f("llama-gqa", {kAll, "q_proj,v_proj"});
  auto cfg = test::quickstart("configs/quickstart.yaml", f.set());
  cfg.model.path = f.model;
  auto engine = test::start_engine(cfg);
  REQUIRE(engine->lora_modules().size() == 2);
  CHECK(engine->lora_adapter("a1") == 1u);
  CHECK(engine->lora_adapter("a2") == 2u);
  CHECK_FALSE(engine->lora_adapter("nope"));

  const std::vector<int32_t> p1{1, 42, 7, 300, 15, 99}, p2{1, 5, 9, 20, 400, 3, 3};
  std::vector<GenerateRequest> requests;
  for (uint32_t lora : {0u, 1u, 2u, 1u, 0u, 2u}) requests.push_back(greedy(requests.size() % 2 ? p2 : p1, 12, lora));
  const auto together = generate(*engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i << " on adapter " << requests[i].lora);
    const auto alone = generate(*engine, {requests[i]});
    CHECK(together[i].generated_ids == alone[0].generated_ids);
    CHECK(together[i].logprobs[5].logprob == alone[0].logprobs[5].logprob);
    const std::filesystem::path adapter = requests[i].lora ? f.adapters[requests[i].lora - 1] : "";
    const Reference ref = reference(f.model, adapter, requests[i].prompt_ids, 12, f.tmp.path() / "ref.json");
    CHECK(together[i].generated_ids == ref.greedy);
  }
  CHECK(together[0].generated_ids != together[2].generated_ids);  // the adapters say something else
  CHECK(together[1].generated_ids != together[5].generated_ids);
  CHECK(together[1].generated_ids == together[3].generated_ids);  // the same adapter and prompt twice
}

TEST_CASE("LoRA - the prefix cache never hands one adapter's KV to another - the same adapter hits it",
          "[lora][engine]") {
  Folder f("llama-gqa", {kAll});
  auto cfg = test::quickstart("configs/quickstart.yaml", f.set());
  cfg.model.path = f.model;
  auto engine = test::start_engine(cfg);
  std::vector<int32_t> prompt{1};
  for (int i = 0; i < 40; ++i) prompt.push_back(3 + (i * 37) % 500);  // two full blocks of 16 and a part
  const auto fresh_adapter = generate(*engine, {greedy(prompt, 8, 1)});  // caches the adapter's blocks
  auto before = engine->stats();
  REQUIRE(before.ok());
  const auto base = generate(*engine, {greedy(prompt, 8, 0)});  // must not reuse them
  auto after_base = engine->stats();
  REQUIRE(after_base.ok());
  CHECK(after_base->prefix_hit_blocks == before->prefix_hit_blocks);
  const auto again = generate(*engine, {greedy(prompt, 8, 1)});  // reuses its own
  auto after = engine->stats();
  REQUIRE(after.ok());
  CHECK(after->prefix_hit_blocks == after_base->prefix_hit_blocks + 2);
  CHECK(again[0].generated_ids == fresh_adapter[0].generated_ids);
  CHECK(again[0].logprobs[7].logprob == fresh_adapter[0].logprobs[7].logprob);
  CHECK(base[0].generated_ids != fresh_adapter[0].generated_ids);
  const Reference ref = reference(f.model, {}, prompt, 8, f.tmp.path() / "base.json");
  CHECK(base[0].generated_ids == ref.greedy);
}

TEST_CASE("LoRA - tp 2, pp 2 and worker processes give the outputs of one worker", "[lora][engine][parallel]") {
  Folder f("llama-gqa", {kAll});
  const std::vector<int32_t> prompt{1, 42, 7, 300, 15, 99};
  std::vector<GenerateRequest> requests{greedy(prompt, 10, 1), greedy(prompt, 10, 0), greedy({1, 8, 8, 2}, 10, 1)};
  auto run = [&](const std::string& file, std::vector<std::string> set) {
    for (const auto& s : f.set()) set.push_back(s);
    auto cfg = test::quickstart(file, set);
    cfg.model.path = f.model;
    auto engine = test::start_engine(cfg);
    return generate(*engine, requests);
  };
  const auto one = run("configs/quickstart.yaml", {});
  for (const auto& [file, set] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"configs/tp2.yaml", {}}, {"configs/pp2.yaml", {}},
           {"configs/quickstart.yaml", {"groups[0].placement=process"}}}) {
    INFO(file << (set.empty() ? "" : " " + set[0]));
    const auto other = run(file, set);
    for (size_t i = 0; i < requests.size(); ++i) {
      CHECK(other[i].generated_ids == one[i].generated_ids);
      for (size_t k = 0; k < one[i].logprobs.size(); ++k)
        CHECK(other[i].logprobs[k].logprob == Approx(one[i].logprobs[k].logprob).margin(1e-4));
    }
  }
}

TEST_CASE("LoRA - bad adapters and requests are refused by name - the engine keeps serving", "[lora][engine]") {
  Folder f("llama-gqa", {kAll});
  auto start = [&](std::vector<std::string> set) {
    TopologyOverrides o;
    o.set = std::move(set);
    o.model = f.model;
    auto cfg = load_topology(test::source_dir() / "configs/quickstart.yaml", o);
    if (!cfg) return Result<std::unique_ptr<Engine>>(cfg.error());
    return Engine::start(*cfg, test::engine_options());
  };
  auto refused = [&](std::vector<std::string> set, const std::string& names) {
    auto engine = start(std::move(set));
    REQUIRE_FALSE(engine.ok());
    INFO(engine.error().message);
    CHECK(engine.error().message.find(names) != std::string::npos);
  };
  refused({"lora.modules.x=" + (f.tmp.path() / "missing").string()}, "lora.modules.x");
  refused({"lora.modules.a1=" + f.adapters[0].string(), "lora.max_lora_rank=4"}, "max_lora_rank");
  refused({"lora.modulez.x=y"}, "lora.modulez");
  refused({"lora.modules={a b: c}"}, "lora.modules.a b");

  // An adapter folder whose config or tensors do not fit the model.
  auto edited = [&](const std::string& name, auto&& edit) {
    const std::filesystem::path dir = f.tmp.path() / name;
    std::filesystem::copy(f.adapters[0], dir);
    std::ifstream in(dir / "adapter_config.json");
    auto j = nlohmann::json::parse(in);
    edit(j);
    std::ofstream(dir / "adapter_config.json") << j.dump();
    return dir;
  };
  refused({"lora.modules.d=" + edited("dora", [](auto& j) { j["use_dora"] = true; }).string()}, "use_dora");
  refused({"lora.modules.s=" + edited("rs", [](auto& j) { j["use_rslora"] = "yes"; }).string()},
          "use_rslora: must be true or false");
  refused({"lora.modules.n=" + edited("alpha", [](auto& j) { j["lora_alpha"] = -1; }).string()}, "lora_alpha");
  {
    const std::filesystem::path dir = f.tmp.path() / "broken";
    std::filesystem::copy(f.adapters[0], dir);
    std::ofstream(dir / "adapter_config.json") << "{\"r\": 8,";
    refused({"lora.modules.b=" + dir.string()}, "adapter_config.json: not a JSON object");
    std::ofstream(dir / "adapter_config.json") << "{\"r\": 8}";
    std::ofstream(dir / "adapter_model.safetensors") << "not safetensors";
    refused({"lora.modules.b=" + dir.string()}, "lora.modules.b");
  }
  refused({"lora.modules.r=" + edited("rank", [](auto& j) { j["r"] = 4; }).string()},
          "expected [4, ");
  refused({"lora.modules.m=" + edited("save", [](auto& j) { j["modules_to_save"] = {"lm_head"}; }).string()},
          "modules_to_save");
  Folder other("qwen3", {kAll});  // another model's adapter: other shapes
  refused({"lora.modules.q=" + other.adapters[0].string()}, "adapter_model.safetensors: tensor");
  // Attention-FFN disaggregation serves adapters of attention; the MLP lives in the FFN pool, where they are refused.
  Folder attention_only("llama-gqa", {"q_proj,o_proj", kAll});
  for (int k = 0; k < 2; ++k) {
    auto cfg = test::quickstart("configs/afd.yaml", {"lora.modules.a=" + attention_only.adapters[size_t(k)].string()});
    cfg.model.path = attention_only.model;
    auto engine = Engine::start(cfg, test::engine_options());
    if (k == 0) {
      REQUIRE(engine.ok());
      auto out = generate(**engine, {greedy({1, 42, 7}, 6, 1), greedy({1, 42, 7}, 6, 0)});
      CHECK(out[0].generated_ids == reference(attention_only.model, attention_only.adapters[0], {1, 42, 7}, 6,
                                              f.tmp.path() / "afd.json").greedy);
      CHECK(out[1].generated_ids == reference(attention_only.model, {}, {1, 42, 7}, 6, f.tmp.path() / "afd0.json").greedy);
    } else {
      REQUIRE_FALSE(engine.ok());
      INFO(engine.error().message);
      CHECK(engine.error().message.find("attention-FFN disaggregation") != std::string::npos);
    }
  }

  auto engine = start({"lora.modules.a1=" + f.adapters[0].string()});
  REQUIRE(engine.ok());
  auto out = (*engine)->generate({greedy({1, 2, 3}, 4, 2)});  // adapter 2 of 1
  REQUIRE(out.ok());
  REQUIRE((*out)[0].error);
  CHECK((*out)[0].error->message.find("LoRA adapter 2") != std::string::npos);
  CHECK(generate(**engine, {greedy({1, 2, 3}, 4, 1)})[0].generated_ids.size() == 4);
}
