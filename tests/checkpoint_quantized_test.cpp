// AWQ and GPTQ checkpoints (config.json quantization_config; X.qweight / X.qzeros / X.scales / X.g_idx in the
// safetensors, packed as AutoAWQ's gemm kernels and AutoGPTQ write them): a random Llama stored that way loads and
// gives the logits of the same model stored with the dequantized weights in f32 (within 1% of the largest logit; act-order
// GPTQ, re-quantized to int8 in contiguous groups, within 5% on these adversarial random groups);
// bad tensors are refused by name.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "cpu_rank.hpp"
#include "memory/checkpoint_quantized.hpp"
#include "plugins/model_registry.hpp"
#include "safetensors_writer.hpp"
#include "test_util.hpp"

using namespace actord;
namespace fs = std::filesystem;

namespace {

constexpr int kHidden = 128, kFfn = 256, kLayers = 2, kHeads = 4, kKvHeads = 2, kVocab = 512, kGroup = 32;

// One linear layer [out, in] quantized in groups of kGroup: codes, zero points and f16 scales, and the values they
// stand for.
struct Linear {
  int64_t out, in;
  std::vector<int> codes, zeros;  // [out, in], [groups, out]
  std::vector<uint16_t> scales;   // [groups, out]
  std::vector<float> values;      // [out, in]
};

Linear random_linear(int64_t out, int64_t in, std::mt19937& rng, bool symmetric) {
  Linear l{out, in, std::vector<int>(out * in), std::vector<int>(in / kGroup * out), std::vector<uint16_t>(in / kGroup * out),
           std::vector<float>(out * in)};
  std::uniform_int_distribution<int> code(0, 15), zero(1, 15);
  std::uniform_real_distribution<float> scale(0.004f, 0.02f);
  for (auto& c : l.codes) c = code(rng);
  for (auto& z : l.zeros) z = symmetric ? 8 : zero(rng);
  for (auto& s : l.scales) s = f32_to_f16(scale(rng));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = i / kGroup;
      l.values[o * in + i] = f16_to_f32(l.scales[g * out + o]) * float(l.codes[o * in + i] - l.zeros[g * out + o]);
    }
  return l;
}

// AWQ: qweight [in, out / 8] with outputs in the order {0, 2, 4, 6, 1, 3, 5, 7}; qzeros [groups, out / 8] alike.
void add_awq(std::map<std::string, test::StoredTensor>& t, const std::string& base, const Linear& l) {
  constexpr int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const int64_t groups = l.in / kGroup;
  std::vector<int32_t> qweight(l.in * l.out / 8, 0), qzeros(groups * l.out / 8, 0);
  for (int64_t i = 0; i < l.in; ++i)
    for (int64_t c = 0; c < l.out / 8; ++c)
      for (int k = 0; k < 8; ++k) qweight[i * (l.out / 8) + c] |= l.codes[(8 * c + order[k]) * l.in + i] << (4 * k);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < l.out / 8; ++c)
      for (int k = 0; k < 8; ++k) qzeros[g * (l.out / 8) + c] |= l.zeros[g * l.out + 8 * c + order[k]] << (4 * k);
  t[base + ".qweight"] = test::stored("I32", {l.in, l.out / 8}, qweight);
  t[base + ".qzeros"] = test::stored("I32", {groups, l.out / 8}, qzeros);
  t[base + ".scales"] = test::stored("F16", {groups, l.out}, l.scales);
}

// GPTQ (checkpoint_format gptq): qweight [in / 8, out] with inputs 8r + k; qzeros [groups, out / 8] holding zero - 1;
// g_idx [in] = i / group, or with `permuted` the groups of a shuffled act order.
void add_gptq(std::map<std::string, test::StoredTensor>& t, const std::string& base, const Linear& l, const std::vector<int32_t>& g_idx) {
  const int64_t groups = l.in / kGroup;
  std::vector<int32_t> qweight(l.in / 8 * l.out, 0), qzeros(groups * l.out / 8, 0);
  for (int64_t i = 0; i < l.in; ++i)
    for (int64_t o = 0; o < l.out; ++o) qweight[(i / 8) * l.out + o] |= l.codes[o * l.in + i] << (4 * (i % 8));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t o = 0; o < l.out; ++o) qzeros[g * (l.out / 8) + o / 8] |= (l.zeros[g * l.out + o] - 1) << (4 * (o % 8));
  t[base + ".qweight"] = test::stored("I32", {l.in / 8, l.out}, qweight);
  t[base + ".qzeros"] = test::stored("I32", {groups, l.out / 8}, qzeros);
  t[base + ".scales"] = test::stored("F16", {groups, l.out}, l.scales);
  t[base + ".g_idx"] = test::stored("I32", {l.in}, g_idx);
}

std::vector<float> normal(size_t n, std::mt19937& rng, float sd, float mean = 0) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The same random Llama twice: `quantized` in the checkpoint format `method` (awq, gptq, gptq-act-order), and
// `reference` with every linear layer's dequantized values in f32.
void write_models(const fs::path& quantized, const fs::path& reference, const std::string& method) {
  std::mt19937 rng(21);
  const bool act_order = method == "gptq-act-order";
  const std::string config_head = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 512,
      "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "torch_dtype": "float16")";
  const std::string qc = method == "awq"
                             ? R"(, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true, "version": "gemm"}})"
                             : std::string(R"(, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": )") +
                                   (act_order ? "true" : "false") + R"(, "sym": false}})";
  test::model_folder(quantized, config_head + qc);
  test::model_folder(reference, config_head + "}");
  std::map<std::string, test::StoredTensor> q, r;
  auto dense = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    q[name] = test::stored("F32", shape, values);
    r[name] = test::stored("F32", shape, values);
  };
  dense("model.embed_tokens.weight", {kVocab, kHidden}, normal(size_t(kVocab) * kHidden, rng, 0.5f));
  dense("lm_head.weight", {kVocab, kHidden}, normal(size_t(kVocab) * kHidden, rng, 0.05f));
  dense("model.norm.weight", {kHidden}, normal(kHidden, rng, 0.05f, 1.0f));
  const int hd = kHidden / kHeads;
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    dense(p + "input_layernorm.weight", {kHidden}, normal(kHidden, rng, 0.05f, 1.0f));
    dense(p + "post_attention_layernorm.weight", {kHidden}, normal(kHidden, rng, 0.05f, 1.0f));
    for (auto [name, out, in] : {std::tuple{"self_attn.q_proj", kHeads * hd, kHidden}, {"self_attn.k_proj", kKvHeads * hd, kHidden},
                                 {"self_attn.v_proj", kKvHeads * hd, kHidden}, {"self_attn.o_proj", kHidden, kHeads * hd},
                                 {"mlp.gate_proj", kFfn, kHidden}, {"mlp.up_proj", kFfn, kHidden}, {"mlp.down_proj", kHidden, kFfn}}) {
      Linear lin = random_linear(out, in, rng, false);
      std::vector<int32_t> g_idx(in);
      for (int i = 0; i < in; ++i) g_idx[i] = i / kGroup;
      if (act_order) {  // inputs' groups shuffled; values follow the group each input is in
        std::shuffle(g_idx.begin(), g_idx.end(), rng);
        for (int64_t o = 0; o < out; ++o)
          for (int i = 0; i < in; ++i)
            lin.values[o * in + i] = f16_to_f32(lin.scales[g_idx[i] * out + o]) *
                                     float(lin.codes[o * in + i] - lin.zeros[g_idx[i] * out + o]);
      }
      const std::string base = p + name;
      if (method == "awq") add_awq(q, base, lin);
      else add_gptq(q, base, lin, g_idx);
      r[base + ".weight"] = test::stored("F32", {out, in}, lin.values);
    }
  }
  test::write_safetensors(quantized / "model.safetensors", q);
  test::write_safetensors(reference / "model.safetensors", r);
}

std::vector<float> logits_of(const fs::path& dir, const std::vector<int32_t>& tokens, cpu::Isa isa) {
  test::CpuRank rank(2, isa);
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(dir));
  if (!model.ok()) FAIL(model.error().message);
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 4, 16);
  std::vector<uint32_t> table{0, 1, 2, 3};
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.seqs = {SeqSlice{0, static_cast<int32_t>(tokens.size()), 0, table.data(), true}};
  std::vector<float> logits;
  REQUIRE((*model)->forward(batch, kv, logits, rank.backend));
  return logits;
}

}  // namespace

TEST_CASE("AWQ and GPTQ checkpoints give the logits of their dequantized weights - act-order GPTQ re-quantized",
          "[quant][checkpoint]") {
  const std::vector<int32_t> tokens{1, 17, 300, 42, 99, 5, 260, 7};
  for (const std::string method : {"awq", "gptq", "gptq-act-order"}) {
    INFO(method);
    test::TempDir dir;
    write_models(dir.path() / "q", dir.path() / "ref", method);
    auto cfg = ModelConfig::load(dir.path() / "q");
    REQUIRE(cfg.ok());
    CHECK(cfg->checkpoint_quantization.method == (method == "awq" ? "awq" : "gptq"));
    // f32 activations: only the offsets' f16 rounding (and act-order's re-quantization) differ from the reference.
    const auto ref = logits_of(dir.path() / "ref", tokens, cpu::Isa::portable);
    const auto got = logits_of(dir.path() / "q", tokens, cpu::Isa::portable);
    REQUIRE(got.size() == ref.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, double(std::abs(got[i] - ref[i])));
      norm = std::max(norm, double(std::abs(ref[i])));
    }
    std::printf("%s checkpoint: max |logit - reference| = %.2e of max |logit| %.2f\n", method.c_str(), err, norm);
    CHECK(err <= (method == "gptq-act-order" ? 0.05 : 0.01) * norm);
  }
}

TEST_CASE("AWQ and GPTQ tensors of the wrong shape or type are refused by name", "[quant][checkpoint]") {
  std::vector<int32_t> words(16 * 4, 0x88888888);
  std::vector<uint16_t> scales(1 * 32, f32_to_f16(0.01f));
  TensorView qweight{DType::f32, true, {32, 4}, reinterpret_cast<const std::byte*>(words.data())};
  TensorView qzeros{DType::f32, true, {1, 4}, reinterpret_cast<const std::byte*>(words.data())};
  TensorView s{DType::f16, false, {1, 32}, reinterpret_cast<const std::byte*>(scales.data())};
  auto ok = awq_matrix("layer", CheckpointTensors{&qweight, &qzeros, &s, nullptr}, 32, 32, 32);
  REQUIRE(ok.ok());
  CHECK(ok->value(3, 5) == 0.0f);  // code 8 - zero 8
  CHECK(ok->offsets.empty());      // every zero is 8: symmetric
  TensorView wrong = qweight;
  wrong.shape = {31, 4};
  auto bad = awq_matrix("layer", CheckpointTensors{&wrong, &qzeros, &s, nullptr}, 32, 32, 32);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("layer.qweight"));
  TensorView float_weight = qweight;
  float_weight.int32 = false;
  CHECK_FALSE(awq_matrix("layer", CheckpointTensors{&float_weight, &qzeros, &s, nullptr}, 32, 32, 32).ok());
  CHECK_FALSE(gptq_matrix("layer", CheckpointTensors{&qweight, &qzeros, &s, nullptr}, 32, 32, 32, 4, true).ok());
}
