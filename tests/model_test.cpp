// The Llama forward pass on stories260K, without actors: logits at BOS and the 256-token greedy reference.
#include <catch2/catch.hpp>
#include <cmath>

#include "cpu_rank.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "memory/safetensors.hpp"
#include "plugins/model_registry.hpp"
#include "plugins/transformer/transformer_model.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

// Logits after one prefill of `tokens` (a fresh KV cache, block 0) on the rank the model was loaded into.
std::vector<float> prefill_logits(Model& model, test::CpuRank& rank, const std::vector<int32_t>& tokens,
                                  DType kv_dtype = DType::f32) {
  const ModelConfig& cfg = model.config();
  KvCache kv(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, 4, 16, kv_dtype);
  std::vector<uint32_t> table{0, 1, 2, 3};
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.seqs = {SeqSlice{0, static_cast<int32_t>(tokens.size()), 0, table.data(), true}};
  std::vector<float> logits;
  REQUIRE(model.forward(batch, kv, logits, rank.backend));
  return logits;
}

}  // namespace

TEST_CASE("stories260K logits at BOS match the reference values", "[model]") {
  test::CpuRank rank;
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(test::stories_dir()));
  REQUIRE(model.ok());
  const auto logits = prefill_logits(**model, rank, {1});
  REQUIRE(logits.size() == 512);
  // From models/stories260K/README.md (independent fp64 implementation).
  CHECK(logits[403] == Approx(17.023515).epsilon(1e-5));
  CHECK(logits[385] == Approx(15.406213).epsilon(1e-5));
  CHECK(logits[410] == Approx(13.108263).epsilon(1e-5));
}

TEST_CASE("greedy decoding reproduces the 256-token reference - prompt fed at once or token by token", "[model]") {
  test::CpuRank rank;
  auto cfg = ModelConfig::load(test::stories_dir());
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(test::stories_dir()));
  REQUIRE(model.ok());
  const auto reference = test::reference_ids();
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 64, 8);
  // Blocks in a scrambled order, to exercise the paging.
  std::vector<uint32_t> table;
  for (uint32_t i = 0; i < 40; ++i) table.push_back((i * 7 + 3) % 64);
  CHECK(test::greedy_from_bos(**model, kv, rank.backend, table, 256) == reference);

  // Prefill of BOS + the first 100 reference tokens in one step predicts reference token 101.
  std::vector<int32_t> prompt{1};
  prompt.insert(prompt.end(), reference.begin(), reference.begin() + 100);
  ForwardBatch batch;
  batch.tokens = prompt;
  batch.seqs = {SeqSlice{0, static_cast<int32_t>(prompt.size()), 0, table.data(), true}};
  std::vector<float> logits;
  REQUIRE((*model)->forward(batch, kv, logits, rank.backend));
  CHECK(Sampler().sample(logits.data(), cfg->vocab_size, SamplingOptions{0.0f, 1.0f, 0, 0}, 0) == reference[100]);
}

// A step of more tokens than one micro-batch runs in pieces; each sequence's logits must equal those of the same
// sequence prefilled alone (a step below the micro-batch size). 3 x 300 tokens: 900 > 512, cut inside the second.
TEST_CASE("a step larger than one micro-batch gives the logits of its sequences run alone", "[model]") {
  test::CpuRank rank;
  auto cfg = ModelConfig::load(test::stories_dir());
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(test::stories_dir()));
  REQUIRE(model.ok());
  const auto reference = test::reference_ids();
  constexpr int kLen = 300, kSeqs = 3, kBlock = 16, kBlocksPerSeq = (kLen + kBlock - 1) / kBlock;
  REQUIRE(kLen * kSeqs > rank.backend.forward_piece_tokens());
  REQUIRE(kLen < rank.backend.forward_piece_tokens());
  std::vector<std::vector<int32_t>> prompts(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    prompts[s].push_back(1);
    for (int i = 1; i < kLen; ++i) prompts[s].push_back(reference[(i * (s + 1)) % reference.size()]);
  }
  std::vector<uint32_t> tables(kSeqs * kBlocksPerSeq);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = uint32_t((i * 5 + 2) % tables.size());
  ForwardBatch big;
  for (int s = 0; s < kSeqs; ++s) {
    big.seqs.push_back(SeqSlice{s * kLen, kLen, 0, tables.data() + s * kBlocksPerSeq, s != 0});
    big.tokens.insert(big.tokens.end(), prompts[s].begin(), prompts[s].end());
  }
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, int(tables.size()), kBlock);
  std::vector<float> logits;
  REQUIRE((*model)->forward(big, kv, logits, rank.backend));
  REQUIRE(logits.size() == size_t(2) * cfg->vocab_size);  // sequences 1 (cut in two) and 2 want logits
  int row = 0;
  for (int s : {1, 2}) {
    KvCache alone_kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, int(tables.size()), kBlock);
    ForwardBatch alone;
    alone.tokens = prompts[s];
    alone.seqs = {SeqSlice{0, kLen, 0, tables.data() + s * kBlocksPerSeq, true}};
    std::vector<float> expected;
    REQUIRE((*model)->forward(alone, alone_kv, expected, rank.backend));
    INFO("sequence " << s);
    for (int v = 0; v < cfg->vocab_size; ++v)
      REQUIRE(logits[size_t(row) * cfg->vocab_size + v] == Approx(expected[v]).margin(1e-4));
    ++row;
  }
}

TEST_CASE("bad model folders give clear errors", "[model]") {
  test::CpuRank rank;
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
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(dir));
  REQUIRE_FALSE(model.ok());
  CHECK(model.error().message == "architecture 'GPT2LMHeadModel' is not supported (known: Gemma2ForCausalLM, "
                                   "Gemma3ForCausalLM, "
                                   "LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Phi3ForCausalLM, Qwen2ForCausalLM, "
                                   "Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM)");
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

TEST_CASE("load_format dummy runs a config-only folder and is reproducible by seed", "[model]") {
  test::CpuRank rank;
  test::TempDir tmp;
  const auto dir = tmp.path() / "dummy";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(test::stories_dir() / "config.json", dir / "config.json");
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  ModelLoadOptions options = rank.load(dir);
  options.load_format = "dummy";
  options.dtype = "bfloat16";
  options.seed = 7;
  auto run = [&](uint64_t seed) {
    options.seed = seed;
    auto model = ModelRegistry::with_builtins().create(*cfg, options);
    if (!model) FAIL(model.error().message);
    return prefill_logits(**model, rank, {1, 5, 9});
  };
  const auto a = run(7), b = run(7), c = run(8);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(std::all_of(a.begin(), a.end(), [](float v) { return std::isfinite(v); }));
}

TEST_CASE("model.dtype converts at load - bf16 logits stay close to f32", "[model]") {
  test::CpuRank rank;
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  auto logits_with = [&](const std::string& dtype) {
    ModelLoadOptions options = rank.load(test::stories_dir());
    options.dtype = dtype;
    auto model = ModelRegistry::with_builtins().create(*cfg, options);
    if (!model) FAIL(model.error().message);
    return prefill_logits(**model, rank, {1});
  };
  const auto f32 = logits_with("auto"), bf16 = logits_with("bfloat16"), f16 = logits_with("float16");
  float max_err_bf16 = 0, max_err_f16 = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    max_err_bf16 = std::max(max_err_bf16, std::abs(bf16[i] - f32[i]));
    max_err_f16 = std::max(max_err_f16, std::abs(f16[i] - f32[i]));
  }
  CHECK(max_err_bf16 > 0.0f);   // really converted
  CHECK(max_err_bf16 < 0.5f);   // of logits up to ~17
  CHECK(max_err_f16 < 0.05f);
  CHECK(std::max_element(bf16.begin(), bf16.end()) - bf16.begin() == 403);
}

TEST_CASE("rope scaling - linear divides the frequencies and llama3 blends them by wavelength", "[model]") {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  const auto plain = c.rope_inv_freq();
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.0f;
  const auto linear = c.rope_inv_freq();
  for (size_t i = 0; i < plain.size(); ++i) CHECK(linear[i] == Approx(plain[i] / 4.0f));
  // Llama 3.1's published parameters: factor 8, low 1, high 4, original context 8192.
  c.rope_scaling = {"llama3", 8.0f, 1.0f, 4.0f, 8192};
  const auto l3 = c.rope_inv_freq();
  int kept = 0, slowed = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * M_PI / plain[i];
    if (wavelen < 8192.0 / 4) {
      CHECK(l3[i] == plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      CHECK(l3[i] == Approx(plain[i] / 8.0f));
      ++slowed;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      CHECK(l3[i] == Approx((1 - smooth) * plain[i] / 8.0 + smooth * plain[i]).epsilon(1e-5));
      ++blended;
    }
  }
  CHECK(kept > 0);
  CHECK(slowed > 0);
  CHECK(blended > 0);
}

TEST_CASE("loading names the missing or misshapen tensor", "[model]") {
  test::CpuRank rank;
  test::TempDir tmp;
  const auto dir = tmp.path() / "model";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    std::filesystem::copy_file(test::stories_dir() / f, dir / f);
  }
  // A safetensors file holding only the embedding: everything else is missing.
  auto src = SafetensorsFile::open(test::stories_dir() / "model.safetensors");
  REQUIRE(src.ok());
  const auto& embed = src->tensors().at("model.embed_tokens.weight");
  const std::string header = R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[512,64],"data_offsets":[0,131072]}})";
  uint64_t n = header.size();
  test::write_file(dir / "model.safetensors", std::string(reinterpret_cast<char*>(&n), 8) + header +
                                                  std::string(reinterpret_cast<const char*>(embed.data), 131072));
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(dir));
  REQUIRE_FALSE(model.ok());
  CHECK(model.error().message == dir.string() + ": missing tensor 'model.norm.weight'");
  // A config that disagrees with the weights' shapes.
  std::ifstream in(test::stories_dir() / "config.json");
  auto j = nlohmann::json::parse(in);
  j["vocab_size"] = 500;
  test::write_file(dir / "config.json", j.dump());
  cfg = ModelConfig::load(dir);
  model = ModelRegistry::with_builtins().create(*cfg, rank.load(dir));
  REQUIRE_FALSE(model.ok());
  CHECK(model.error().message == dir.string() +
                                     ": tensor 'model.embed_tokens.weight' has the wrong shape: expected [500, 64], "
                                     "found [512, 64]");
}

TEST_CASE("a bf16 or f16 KV cache keeps the logits close to the f32 cache", "[model]") {
  test::CpuRank rank;
  auto cfg = ModelConfig::load(test::stories_dir());
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(test::stories_dir()));
  REQUIRE(model.ok());
  const auto reference = test::reference_ids();
  std::vector<int32_t> prompt{1};
  prompt.insert(prompt.end(), reference.begin(), reference.begin() + 40);
  const auto exact = prefill_logits(**model, rank, prompt, DType::f32);
  for (auto [kv_dtype, tolerance] : {std::pair{DType::f16, 2e-3f}, std::pair{DType::bf16, 2e-2f}}) {
    INFO("kv dtype " << dtype_name(kv_dtype));
    const auto logits = prefill_logits(**model, rank, prompt, kv_dtype);
    REQUIRE(logits.size() == exact.size());
    float max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      max_abs = std::max(max_abs, std::abs(exact[i]));
      max_diff = std::max(max_diff, std::abs(logits[i] - exact[i]));
    }
    CHECK(max_diff > 0.0f);  // the cache really stored the narrower type
    CHECK(max_diff <= tolerance * max_abs);
    // The greedy choice after the prompt is the reference's next token.
    const auto* last = logits.data() + logits.size() - cfg->vocab_size;
    CHECK(std::max_element(last, last + cfg->vocab_size) - last == reference[40]);
  }
}

TEST_CASE("the KV cache dtype follows the setting - then the model dtype - then torch_dtype", "[model]") {
  CHECK(ModelConfig::kv_cache_dtype("float16", "bfloat16", "float32") == DType::f16);
  CHECK(ModelConfig::kv_cache_dtype("auto", "bfloat16", "float32") == DType::bf16);
  CHECK(ModelConfig::kv_cache_dtype("auto", "auto", "bfloat16") == DType::bf16);
  CHECK(ModelConfig::kv_cache_dtype("auto", "auto", "float32") == DType::f32);
  CHECK(ModelConfig::kv_cache_dtype("auto", "auto", "float64") == DType::f32);
  CHECK(ModelConfig::kv_cache_dtype("int8", "bfloat16", "float32") == DType::i8);
  CHECK(ModelConfig::kv_cache_dtype("auto", "auto", "int8") == DType::f32);  // never from a weight dtype
}

namespace {

// stories260K's config.json with `changes` merged in (a null value removes the key), loaded from a fresh folder.
Result<ModelConfig> load_changed(const test::TempDir& tmp, const nlohmann::json& changes) {
  std::ifstream in(test::stories_dir() / "config.json");
  auto j = nlohmann::json::parse(in);
  for (const auto& [key, value] : changes.items()) {
    if (value.is_null()) j.erase(key);
    else j[key] = value;
  }
  test::write_file(tmp.path() / "config.json", j.dump());
  return ModelConfig::load(tmp.path());
}

std::string load_error(const test::TempDir& tmp, const nlohmann::json& changes) {
  auto cfg = load_changed(tmp, changes);
  if (cfg.ok()) return "(loaded)";
  return cfg.error().message;
}

}  // namespace

TEST_CASE("config.json numbers are range-checked - never cut to 32 bits - and the error names the file and key",
          "[model][config]") {
  test::TempDir tmp;
  const std::string file = (tmp.path() / "config.json").string() + ": ";
  REQUIRE(load_changed(tmp, nlohmann::json::object()).ok());
  // 4294967360 = 2^32 + 64: get<int>() made it 64, a working model of another shape.
  CHECK(load_error(tmp, {{"hidden_size", 4294967360ull}}) ==
        file + "hidden_size: must be an integer between 1 and 1048576, got 4294967360");
  CHECK(load_error(tmp, {{"vocab_size", 18446744073709551615ull}}) ==
        file + "vocab_size: must be an integer between 1 and 16777216, got 18446744073709551615");
  CHECK(load_error(tmp, {{"num_hidden_layers", -1}}) ==
        file + "num_hidden_layers: must be an integer between 1 and 65536, got -1");
  CHECK(load_error(tmp, {{"num_hidden_layers", 0}}) ==
        file + "num_hidden_layers: must be an integer between 1 and 65536, got 0");
  CHECK(load_error(tmp, {{"hidden_size", 64.5}}) == file + "hidden_size: must be an integer, got 64.5");
  CHECK(load_error(tmp, {{"intermediate_size", "172"}}) ==
        file + "intermediate_size: must be an integer, got \"172\"");
  CHECK(load_error(tmp, {{"max_position_embeddings", 2147483648ll}}) ==
        file + "max_position_embeddings: must be an integer between 1 and 1073741824, got 2147483648");
  CHECK(load_error(tmp, {{"num_key_value_heads", 16}}) ==
        file + "num_key_value_heads: must be an integer between 1 and 8, got 16");
  CHECK(load_error(tmp, {{"num_key_value_heads", 3}}) ==
        file + "num_key_value_heads: must divide num_attention_heads (8), got 3");
  CHECK_THAT(load_error(tmp, {{"head_dim", 7}}), Catch::StartsWith(file + "head_dim: the head dimension"));
  CHECK_THAT(load_error(tmp, {{"head_dim", nullptr}, {"hidden_size", 8}}),
             Catch::StartsWith(file + "hidden_size: the head dimension") && Catch::EndsWith("got 1"));
  CHECK(load_error(tmp, {{"num_attention_heads", 65536}, {"num_key_value_heads", 1}, {"head_dim", 32}}) ==
        file + "num_attention_heads: times head_dim (65536 x 32) must be at most 1048576");
  CHECK_THAT(load_error(tmp, {{"hidden_size", 1 << 20}, {"intermediate_size", 1 << 20}, {"num_hidden_layers", 65536}}),
             Catch::StartsWith(file + "hidden_size: with intermediate_size") && Catch::Contains("2^50"));
  CHECK(load_error(tmp, {{"num_local_experts", 4}, {"num_experts_per_tok", 5}}) ==
        file + "num_experts_per_tok: must be an integer between 1 and 4, got 5");
  CHECK(load_error(tmp, {{"architectures", nlohmann::json::array()}}) ==
        file + "architectures: must be a non-empty list of names, got []");
  CHECK(load_error(tmp, {{"tie_word_embeddings", "yes"}}) ==
        file + "tie_word_embeddings: must be true or false, got \"yes\"");
  CHECK(load_error(tmp, {{"hidden_act", 3}}) == file + "hidden_act: must be a string, got 3");

  // Floats: finite as a float (1e39 is beyond its range), positive, eps below 1.
  CHECK(load_error(tmp, {{"rms_norm_eps", 0.0}}) == file + "rms_norm_eps: must be a number above 0 and below 1, got 0.0");
  CHECK(load_error(tmp, {{"rms_norm_eps", 1e-60}}) ==
        file + "rms_norm_eps: must be a number above 0 and below 1, got 1e-60");
  CHECK(load_error(tmp, {{"rope_theta", 1e39}}) == file + "rope_theta: must be a finite positive number, got 1e+39");
  CHECK(load_error(tmp, {{"rope_theta", -10000.0}}) ==
        file + "rope_theta: must be a finite positive number, got -10000.0");
  CHECK(load_error(tmp, {{"rope_theta", "1e4"}}) == file + "rope_theta: must be a finite positive number, got \"1e4\"");
  CHECK(load_changed(tmp, {{"rope_theta", 500000}}).value().rope_theta == 500000.0f);  // an integer is a number
  CHECK(load_error(tmp, {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.0}}}}) ==
        file + "rope_scaling.factor: must be a finite positive number, got 0.0");
  CHECK(load_error(tmp, {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 1e300}}}}) ==
        file + "rope_scaling.factor: must be a finite positive number, got 1e+300");
  CHECK(load_error(tmp, {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                                           {"high_freq_factor", 4.0}}}}) ==
        file + "rope_scaling.high_freq_factor: must be greater than low_freq_factor (llama3 divides by their "
               "difference)");
  CHECK(load_error(tmp, {{"rope_scaling", {{"rope_type", "llama3"}, {"original_max_position_embeddings", -8192}}}}) ==
        file + "rope_scaling.original_max_position_embeddings: must be an integer between 1 and 1073741824, got -8192");
  CHECK(load_error(tmp, {{"rope_scaling", "linear"}}) == file + "rope_scaling: must be an object or null, got \"linear\"");
  CHECK(load_error(tmp, {{"rope_scaling", {{"rope_type", "dynamic"}}}}) ==
        file + "rope_scaling: type 'dynamic' is not supported (linear, llama3, longrope, yarn)");

  // Sliding-window fields, when the architecture uses them.
  CHECK(load_error(tmp, {{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 0}}) ==
        file + "sliding_window: must be an integer between 1 and 2147483647, got 0");
  CHECK(load_error(tmp, {{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 4294967300ll}}) ==
        file + "sliding_window: must be an integer between 1 and 2147483647, got 4294967300");
  CHECK(load_error(tmp, {{"architectures", {"Qwen2ForCausalLM"}}, {"use_sliding_window", true},
                         {"sliding_window", 8}, {"max_window_layers", -1}}) ==
        file + "max_window_layers: must be an integer between 0 and 2147483647, got -1");
  CHECK(load_error(tmp, {{"architectures", {"Qwen2ForCausalLM"}}, {"use_sliding_window", true},
                         {"layer_types", {"full_attention"}}}) ==
        file + "layer_types: must be a list of num_hidden_layers (5) names, got [\"full_attention\"]");
  CHECK(load_error(tmp, {{"architectures", {"Qwen2ForCausalLM"}}, {"use_sliding_window", "yes"}}) ==
        file + "use_sliding_window: must be true or false, got \"yes\"");

  // Qwen3-MoE's expert fields.
  const nlohmann::json qwen_moe = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_experts", 4},
                                   {"num_experts_per_tok", 2}};
  auto with = [&](nlohmann::json more) {
    nlohmann::json j = qwen_moe;
    j.update(more);
    return j;
  };
  CHECK(load_error(tmp, with({{"mlp_only_layers", {1, 7}}})) ==
        file + "mlp_only_layers: must hold layer indices below num_hidden_layers (5), got 7");
  CHECK(load_error(tmp, with({{"mlp_only_layers", "all"}})) ==
        file + "mlp_only_layers: must be a list of layer indices, got \"all\"");
  CHECK(load_error(tmp, with({{"num_experts_per_tok", 5}})) ==
        file + "num_experts_per_tok: must be an integer between 1 and 4, got 5");
  CHECK(load_error(tmp, with({{"moe_intermediate_size", 0}})) ==
        file + "moe_intermediate_size: must be an integer between 1 and 1048576, got 0");
  auto moe = load_changed(tmp, with({{"mlp_only_layers", {1}}, {"decoder_sparse_step", 2}, {"moe_intermediate_size", 8}}));
  REQUIRE(moe.ok());
  CHECK(moe->sparse_layers == std::vector<bool>{false, false, false, true, false});  // (l + 1) % 2 == 0, not layer 1
  CHECK(moe->moe_intermediate_size == 8);
  CHECK_FALSE(moe->norm_topk_prob);  // Qwen3MoeConfig's default
  CHECK(moe->qk_norm);

  // A number beyond double's range is refused by the parser.
  test::write_file(tmp.path() / "config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 1e400})");
  CHECK_THAT(ModelConfig::load(tmp.path()).error().message, Catch::StartsWith(file + "malformed JSON") &&
                                                                Catch::Contains("number overflow"));
}

TEST_CASE("sliding windows follow HF per architecture - Qwen2 only with use_sliding_window from max_window_layers on",
          "[model][config]") {
  test::TempDir tmp;
  auto windows = [&](const std::string& arch, nlohmann::json changes) {
    changes["architectures"] = {arch};
    auto cfg = load_changed(tmp, changes);
    if (!cfg) FAIL(cfg.error().message);
    REQUIRE(cfg->sliding_window.size() == 5);  // stories260K has 5 layers
    return cfg->sliding_window;
  };
  using W = std::vector<int>;
  const W none(5, 0);
  // Llama has no window, whatever the config says.
  CHECK(windows("LlamaForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", true}}) == none);
  // Mistral: every layer; absent is MistralConfig's default 4096, null none; it has no use_sliding_window.
  CHECK(windows("MistralForCausalLM", {{"sliding_window", 4}}) == W(5, 4));
  CHECK(windows("MistralForCausalLM", {}) == W(5, 4096));
  {  // (load_changed removes a key set to null)
    std::ifstream in(test::stories_dir() / "config.json");
    auto j = nlohmann::json::parse(in);
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = nullptr;
    test::write_file(tmp.path() / "config.json", j.dump());
    CHECK(ModelConfig::load(tmp.path()).value().sliding_window == none);
  }
  CHECK(windows("MistralForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", false}}) == W(5, 4));
  // Mixtral: every layer when set; MixtralConfig's default is none.
  CHECK(windows("MixtralForCausalLM", {{"num_local_experts", 2}, {"num_experts_per_tok", 1}}) == none);
  CHECK(windows("MixtralForCausalLM", {{"num_local_experts", 2}, {"num_experts_per_tok", 1}, {"sliding_window", 4}}) ==
        W(5, 4));
  // Qwen2: nothing without use_sliding_window (absent is false), even with sliding_window set.
  CHECK(windows("Qwen2ForCausalLM", {{"sliding_window", 4}}) == none);
  CHECK(windows("Qwen2ForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", false}}) == none);
  // With it: layers >= max_window_layers (default 28, past stories' 5 layers).
  CHECK(windows("Qwen2ForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", true}, {"max_window_layers", 2}}) ==
        W{0, 0, 4, 4, 4});
  CHECK(windows("Qwen2ForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", true}}) == none);
  CHECK(windows("Qwen2ForCausalLM", {{"use_sliding_window", true}, {"max_window_layers", 4}}) ==
        W{0, 0, 0, 0, 4096});
  // layer_types, when listed, decides the layers instead.
  const nlohmann::json types = {"sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                "full_attention"};
  CHECK(windows("Qwen2ForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", true}, {"max_window_layers", 0},
                                     {"layer_types", types}}) == W{4, 0, 4, 0, 0});
  CHECK(windows("Qwen2ForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", false}, {"layer_types", types}}) ==
        none);
  // Another architecture (a plugin's): sliding_window when set, unless use_sliding_window is false.
  CHECK(windows("GeluLlamaForCausalLM", {{"sliding_window", 4}}) == W(5, 4));
  CHECK(windows("GeluLlamaForCausalLM", {{"sliding_window", 4}, {"use_sliding_window", false}}) == none);
  CHECK(windows("GeluLlamaForCausalLM", {}) == none);
}

TEST_CASE("Gemma 2 and 3 configs: their defaults, windows by pattern or layer_types, local RoPE, logit caps and "
          "refused keys", "[model][config]") {
  test::TempDir tmp;
  const std::string file = (tmp.path() / "config.json").string() + ": ";
  auto gemma = [](nlohmann::json changes) {
    changes["architectures"] = {"Gemma3ForCausalLM"};
    return changes;
  };
  // Gemma3TextConfig's defaults where config.json says nothing (stories260K's keys otherwise; 5 layers).
  auto cfg = load_changed(tmp, gemma({{"rms_norm_eps", nullptr}, {"rope_theta", nullptr}, {"head_dim", nullptr},
                                      {"hidden_act", nullptr}, {"tie_word_embeddings", nullptr}}));
  if (!cfg) FAIL(cfg.error().message);
  CHECK(cfg->hidden_act == "gelu_pytorch_tanh");
  CHECK(cfg->tie_word_embeddings);
  CHECK(cfg->rms_norm_eps == 1e-6f);
  CHECK(cfg->rope_theta == 1e6f);
  CHECK(cfg->rope_local_theta == 10000.0f);
  CHECK(cfg->query_pre_attn_scalar == 256.0f);
  CHECK(cfg->head_dim == 256);
  CHECK(cfg->qk_norm);
  // Every layer but each sliding_window_pattern-th (default 6) slides, window 4096 by default.
  CHECK(cfg->sliding_window == std::vector<int>(5, 4096));
  cfg = load_changed(tmp, gemma({{"sliding_window", 7}, {"sliding_window_pattern", 2}}));
  REQUIRE(cfg.ok());
  CHECK(cfg->sliding_window == std::vector<int>{7, 0, 7, 0, 7});
  const nlohmann::json types = {"full_attention", "sliding_attention", "sliding_attention", "full_attention",
                                "full_attention"};
  cfg = load_changed(tmp, gemma({{"sliding_window", 7}, {"sliding_window_pattern", 2}, {"layer_types", types}}));
  REQUIRE(cfg.ok());
  CHECK(cfg->sliding_window == std::vector<int>{0, 7, 7, 0, 0});
  // The sliding layers' frequencies: rope_local_base_freq, never scaled; the others rope_theta, scaled.
  cfg = load_changed(tmp, gemma({{"head_dim", 8}, {"rope_local_base_freq", 100.0}, {"rope_theta", 1e4},
                                 {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}}));
  REQUIRE(cfg.ok());
  const std::vector<float> local = cfg->rope_inv_freq_local();
  REQUIRE(local.size() == 4);
  CHECK(local[0] == 1.0f);
  CHECK(local[1] == Approx(1.0 / std::sqrt(10.0)));
  CHECK(local[2] == Approx(0.1));
  CHECK(local[3] == Approx(1.0 / std::sqrt(1000.0)));
  CHECK(cfg->rope_inv_freq()[1] == Approx(0.1f / 8.0f));
  CHECK(cfg->attn_logit_softcapping == 0.0f);  // Gemma 3 caps nothing unless told
  CHECK(cfg->final_logit_softcapping == 0.0f);
  cfg = load_changed(tmp, gemma({{"final_logit_softcapping", 30.0}}));
  REQUIRE(cfg.ok());
  CHECK(cfg->final_logit_softcapping == 30.0f);
  CHECK(load_error(tmp, gemma({{"attn_logit_softcapping", -1.0}})) ==
        file + "attn_logit_softcapping: must be a finite positive number, got -1.0");
  CHECK(load_error(tmp, gemma({{"use_bidirectional_attention", true}})) ==
        file + "use_bidirectional_attention: bidirectional attention (an embedding model) is not supported");
  CHECK(load_error(tmp, gemma({{"query_pre_attn_scalar", 0}})) ==
        file + "query_pre_attn_scalar: must be a finite positive number, got 0");
  CHECK(load_error(tmp, gemma({{"layer_types", {"full_attention"}}})) ==
        file + "layer_types: must be a list of num_hidden_layers (5) names, got [\"full_attention\"]");
  // Gemma 2 (Gemma2Config): both caps by default (a null turns one off), windows on every second layer, one RoPE base.
  auto gemma2 = [](nlohmann::json changes) {
    changes["architectures"] = {"Gemma2ForCausalLM"};
    return changes;
  };
  cfg = load_changed(tmp, gemma2({{"rope_theta", nullptr}, {"head_dim", nullptr}, {"sliding_window", 6}}));
  REQUIRE(cfg.ok());
  CHECK(cfg->attn_logit_softcapping == 50.0f);
  CHECK(cfg->final_logit_softcapping == 30.0f);
  CHECK(cfg->sliding_window == std::vector<int>{6, 0, 6, 0, 6});
  CHECK(cfg->rope_theta == 10000.0f);
  CHECK(cfg->rope_local_theta == 0.0f);
  CHECK(cfg->head_dim == 256);
  CHECK_FALSE(cfg->qk_norm);
  {  // (load_changed removes a key set to null: write the null itself)
    std::ifstream in(test::stories_dir() / "config.json");
    auto j = nlohmann::json::parse(in);
    j["architectures"] = {"Gemma2ForCausalLM"};
    j["attn_logit_softcapping"] = nullptr;
    test::write_file(tmp.path() / "config.json", j.dump());
    cfg = ModelConfig::load(tmp.path());
    REQUIRE(cfg.ok());
    CHECK(cfg->attn_logit_softcapping == 0.0f);
    CHECK(cfg->final_logit_softcapping == 30.0f);
  }
  // An activation no backend has is refused when the model is made, naming Gemma's key.
  cfg = load_changed(tmp, gemma({{"hidden_activation", "relu2"}}));
  REQUIRE(cfg.ok());
  test::CpuRank rank;
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(tmp.path()));
  REQUIRE_FALSE(model.ok());
  CHECK(model.error().message ==
        "hidden_activation 'relu2' is not supported (silu, gelu_pytorch_tanh, gelu_new, gelu)");
}

TEST_CASE("Phi-3 configs: partial rotary, LongRoPE's factors chosen by the served context and its attention factor, "
          "YaRN, and what is refused", "[model][config]") {
  test::TempDir tmp;
  const std::string file = (tmp.path() / "config.json").string() + ": ";
  // Factors for 6 rotated dimensions (3 pairs) and for all 8 of stories260K's head_dim (4 pairs).
  const std::vector<float> shorts{1.0f, 1.5f, 2.0f}, longs{4.0f, 8.0f, 16.0f};
  const std::vector<float> shorts4{1.0f, 1.5f, 2.0f, 2.5f}, longs4{4.0f, 8.0f, 16.0f, 32.0f};
  auto phi3 = [&](nlohmann::json changes) {
    changes["architectures"] = {"Phi3ForCausalLM"};
    if (!changes.contains("rope_scaling"))
      changes["rope_scaling"] = {{"type", "longrope"}, {"short_factor", shorts4}, {"long_factor", longs4}};
    return changes;
  };
  // stories260K's shapes (head_dim 8, max_position_embeddings 512): 6 of 8 rotated, Phi3Config's pretrained context
  // 4096 when the key is absent, which the 512 served stay under: the short factors, no attention factor.
  auto cfg = load_changed(tmp, phi3({{"partial_rotary_factor", 0.75},
                                     {"rope_scaling", {{"type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs}}}}));
  if (!cfg) FAIL(cfg.error().message);
  CHECK(cfg->rotary_dim == 6);
  CHECK(cfg->rope_scaling.type == "longrope");
  CHECK(cfg->rope_scaling.original_max_position_embeddings == 4096);
  CHECK(cfg->rope_attention_factor() == 1.0f);
  std::vector<float> inv = cfg->rope_inv_freq();
  REQUIRE(inv.size() == 4);  // head_dim / 2, the unrotated pair 0
  for (int i = 0; i < 3; ++i) CHECK(inv[size_t(i)] == Approx(1.0 / (shorts[size_t(i)] * std::pow(10000.0, 2.0 * i / 6))));
  CHECK(inv[3] == 0.0f);
  // Phi-3.5-mini's ratio (131072 / 4096): cos and sin times sqrt(1 + ln 32 / ln 4096); the long factors above the
  // pretrained context, the short ones at or below it.
  cfg = load_changed(tmp, phi3({{"max_position_embeddings", 131072}}));
  REQUIRE(cfg.ok());
  CHECK(cfg->rotary_dim == 8);
  CHECK(cfg->rope_attention_factor() == Approx(std::sqrt(1.0 + std::log(32.0) / std::log(4096.0))));
  CHECK(cfg->rope_inv_freq()[1] == Approx(1.0 / (8.0 * std::pow(10000.0, 2.0 / 8))));
  CHECK(cfg->rope_inv_freq(4097)[1] == Approx(1.0 / (8.0 * std::pow(10000.0, 2.0 / 8))));
  CHECK(cfg->rope_inv_freq(4096)[1] == Approx(1.0 / (1.5 * std::pow(10000.0, 2.0 / 8))));
  // Phi-3's first configs call it "su"; attention_factor, when given, is taken as it is.
  cfg = load_changed(tmp, phi3({{"rope_scaling", {{"type", "su"}, {"short_factor", {1, 1, 1, 1}},
                                                   {"long_factor", {2, 2, 2, 2}}, {"attention_factor", 1.5}}}}));
  if (!cfg) FAIL(cfg.error().message);
  CHECK(cfg->rope_scaling.type == "longrope");
  CHECK(cfg->rope_attention_factor() == 1.5f);
  // Refused, naming the key.
  CHECK(load_error(tmp, phi3({{"rope_scaling", {{"type", "longrope"}, {"short_factor", shorts4}, {"long_factor", longs}}}})) ==
        file + "rope_scaling.long_factor: must be a list of rotary_dim / 2 = 4 numbers, got [4.0,8.0,16.0]");
  CHECK(load_error(tmp, phi3({{"rope_scaling", {{"type", "longrope"}, {"long_factor", {1, 1, 1, 1}}}}})) ==
        file + "rope_scaling.short_factor: missing (a list of rotary_dim / 2 = 4 numbers)");
  CHECK(load_error(tmp, phi3({{"partial_rotary_factor", 0.75},
                              {"rope_scaling", {{"type", "longrope"}, {"short_factor", {1, 1, -1}}, {"long_factor", longs}}}})) ==
        file + "rope_scaling.short_factor: must hold finite positive numbers, got -1");
  CHECK(load_error(tmp, phi3({{"partial_rotary_factor", 0.2}})) ==
        file + "partial_rotary_factor: times head_dim (8) must give an even number of rotated dimensions, got 1");
  CHECK(load_error(tmp, phi3({{"partial_rotary_factor", 1.5}})) ==
        file + "partial_rotary_factor: must be a number above 0 and at most 1, got 1.5");

  // YaRN (factor 4 over a pretrained 64 on head_dim 8): the fastest pairs kept, the slowest interpolated (divided by
  // 4), a ramp between; cos and sin times 0.1 ln 4 + 1, or DeepSeek's mscale ratio.
  const nlohmann::json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  cfg = load_changed(tmp, {{"rope_scaling", yarn}});
  REQUIRE(cfg.ok());
  CHECK(cfg->rope_attention_factor() == Approx(0.1 * std::log(4.0) + 1.0));
  inv = cfg->rope_inv_freq();
  CHECK(inv[0] == 1.0f);
  CHECK(inv[3] == Approx(std::pow(10000.0, -6.0 / 8) / 4.0));
  CHECK(inv[1] < float(std::pow(10000.0, -2.0 / 8)));
  CHECK(inv[1] > float(std::pow(10000.0, -2.0 / 8) / 4.0));
  nlohmann::json deepseek = yarn;
  deepseek["mscale"] = 1.0;
  deepseek["mscale_all_dim"] = 0.5;
  cfg = load_changed(tmp, {{"rope_scaling", deepseek}});
  REQUIRE(cfg.ok());
  CHECK(cfg->rope_attention_factor() == Approx((0.1 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0)));
  CHECK(load_error(tmp, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 0}}}}) ==
        file + "rope_scaling.beta_fast: must be a finite positive number, got 0");
}

TEST_CASE("Gemma 3's multimodal checkpoints load as their text model - text_config with Gemma3TextConfig's defaults, "
          "tensors under language_model.", "[model][config]") {
  test::TempDir tmp;
  const std::string file = (tmp.path() / "config.json").string() + ": ";
  // What Gemma 3 4B's config.json gives of its text model (the rest is Gemma3TextConfig's defaults).
  const nlohmann::json text = {{"hidden_size", 2560},      {"intermediate_size", 10240},
                               {"model_type", "gemma3_text"}, {"num_hidden_layers", 34},
                               {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                               {"sliding_window", 1024}};
  nlohmann::json j = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
                      {"torch_dtype", "bfloat16"}, {"text_config", text}, {"vision_config", {{"hidden_size", 1152}}}};
  test::write_file(tmp.path() / "config.json", j.dump());
  auto cfg = ModelConfig::load(tmp.path());
  if (!cfg) FAIL(cfg.error().message);
  CHECK(cfg->architecture == "Gemma3ForCausalLM");
  CHECK(cfg->weight_prefix == "language_model.");
  CHECK(cfg->torch_dtype == "bfloat16");
  CHECK(cfg->vocab_size == 262208);
  CHECK(cfg->num_heads == 8);
  CHECK(cfg->num_kv_heads == 4);
  CHECK(cfg->head_dim == 256);
  CHECK(cfg->num_layers == 34);
  CHECK(cfg->tie_word_embeddings);
  CHECK(cfg->rope_scaling.type == "linear");
  CHECK(cfg->sliding_window[0] == 1024);
  CHECK(cfg->sliding_window[5] == 0);
  // Errors name the key inside text_config.
  j["text_config"]["num_hidden_layers"] = -1;
  test::write_file(tmp.path() / "config.json", j.dump());
  cfg = ModelConfig::load(tmp.path());
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().message == file + "text_config.num_hidden_layers: must be an integer between 1 and 65536, got -1");
  j.erase("text_config");
  test::write_file(tmp.path() / "config.json", j.dump());
  cfg = ModelConfig::load(tmp.path());
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().message ==
        file + "text_config: missing (Gemma3ForConditionalGeneration keeps its text model's config there)");
}
