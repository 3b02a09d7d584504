// GGUF import: the reader against malformed files, each block format's decoding, the tokenizer rebuilt from a GGUF's
// vocabulary against HF tokenizers' encodings, and stories260K converted to GGUF (as llama.cpp's converter does)
// generating through the engine's model exactly as from its folder (f32) or within the stated bounds (Q8_0, Q4_0).
#include <catch2/catch.hpp>
#include <map>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "cpu_rank.hpp"
#include "engine_test_util.hpp"
#include "gguf_writer.hpp"
#include "memory/gguf_tensors.hpp"
#include "memory/weight_loader.hpp"
#include "plugins/gguf_model.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = test::source_dir() / "tests/fixtures/tokenizers";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// tokenizer.json's vocabulary and added tokens as GGUF tokens in id order, with their types (3: special added,
// 4: other added, 6: byte, 2: unknown, 1: normal, 5: an unused [PADn] where no token has the id).
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};
Vocab vocab_of(const nlohmann::json& tj) {
  Vocab v;
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (auto& [token, id] : tj["model"]["vocab"].items()) {
    const bool byte = token.size() == 6 && token.rfind("<0x", 0) == 0;
    by_id[id.get<int64_t>()] = {token, byte ? 6 : 1};
  }
  for (const auto& a : tj["added_tokens"]) by_id[a["id"].get<int64_t>()] = {a["content"], a["special"].get<bool>() ? 3 : 4};
  const auto unk = tj["model"]["unk_token"];
  for (auto& [id, entry] : by_id) {
    while (static_cast<int64_t>(v.tokens.size()) < id) {  // ids nothing holds (o200k's): llama.cpp's padding tokens
      v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
      v.types.push_back(5);
    }
    REQUIRE(id == static_cast<int64_t>(v.tokens.size()));
    if (unk.is_string() && entry.first == unk.get<std::string>()) entry.second = 2;
    v.tokens.push_back(entry.first);
    v.types.push_back(entry.second);
  }
  return v;
}

// A SentencePiece-style tokenizer.json as a GGUF "llama" vocabulary (scores -id for normal tokens, BOS 1, EOS 2).
void add_spm_vocab(test::GgufWriter& w, const fs::path& tokenizer_json) {
  const Vocab v = vocab_of(read_json(tokenizer_json));
  std::vector<float> scores;
  for (size_t i = 0; i < v.tokens.size(); ++i) scores.push_back(v.types[i] == 1 ? -float(i) : 0.0f);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  w.add_f32s("tokenizer.ggml.scores", scores);
  w.add_i32s("tokenizer.ggml.token_type", v.types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
}

// Layer prefix p's attention and MLP projections, through add(HF name, shape).
template <class Add>
void add_projections(Add& add, const ModelConfig& cfg, const std::string& p) {
  const int64_t h = cfg.hidden_size, ff = cfg.intermediate_size, q = int64_t(cfg.num_heads) * cfg.head_dim,
                kv = int64_t(cfg.num_kv_heads) * cfg.head_dim;
  add(p + "self_attn.q_proj.weight", {q, h});
  add(p + "self_attn.k_proj.weight", {kv, h});
  add(p + "self_attn.v_proj.weight", {kv, h});
  add(p + "self_attn.o_proj.weight", {h, q});
  add(p + "mlp.gate_proj.weight", {ff, h});
  add(p + "mlp.up_proj.weight", {ff, h});
  add(p + "mlp.down_proj.weight", {h, ff});
}

// The shape keys every architecture's GGUF has, as llama.cpp's converter writes them.
void add_shape_keys(test::GgufWriter& w, const std::string& arch, const ModelConfig& cfg) {
  const std::string a = arch + ".";
  w.add_string("general.architecture", arch);
  w.add_u32(a + "block_count", cfg.num_layers);
  w.add_u32(a + "embedding_length", cfg.hidden_size);
  w.add_u32(a + "feed_forward_length", cfg.intermediate_size);
  w.add_u32(a + "attention.head_count", cfg.num_heads);
  w.add_u32(a + "attention.head_count_kv", cfg.num_kv_heads);
  w.add_u32(a + "context_length", cfg.max_position_embeddings);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", cfg.rms_norm_eps);
  w.add_f32(a + "rope.freq_base", cfg.rope_theta);
}

// stories260K's folder as a GGUF, every 2-D weight stored as `type` where its rows are whole blocks (else F32), q and
// k rows in llama.cpp's interleaved order, the SentencePiece vocabulary with scores -id.
void write_stories_gguf(const fs::path& out, GgmlType type) {
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  auto loader = WeightLoader::open(test::stories_dir());
  REQUIRE(loader.ok());
  test::GgufWriter w;
  add_shape_keys(w, "llama", *cfg);
  add_spm_vocab(w, test::stories_dir() / "tokenizer.json");
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  const int h = cfg->hidden_size, hd = cfg->head_dim;
  auto add = [&](const std::string& hf, std::vector<int64_t> shape) {
    auto values = loader->load_f32(hf, shape);
    REQUIRE(values.ok());
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    std::vector<float> data = *values;
    if (hf.find("q_proj") != std::string::npos || hf.find("k_proj") != std::string::npos) {
      for (int64_t r = 0; r < rows; ++r) {  // GGUF row (head, i, j) holds HF row (head, j, i)
        const int64_t head = r / hd, j = (r % hd) / (hd / 2), i = (r % hd) % (hd / 2);
        std::copy_n(values->data() + r * cols, cols, data.data() + (head * hd + 2 * i + j) * cols);
      }
    }
    const bool blocks = cols % ggml_block(uint32_t(type))->elements == 0;
    w.add_tensor(*gguf_tensor_name(hf), rows, cols, data.data(), shape.size() == 2 && blocks ? type : GgmlType::f32);
  };
  add("model.embed_tokens.weight", {cfg->vocab_size, h});
  add("model.norm.weight", {h});
  for (int l = 0; l < cfg->num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    add_projections(add, *cfg, p);
  }
  w.write(out);
}

// A Gemma 3 or Gemma 2 HF folder (f32) as llama.cpp's converter writes it: architecture gemma3 / gemma2, norm weights
// as they multiply (1 + w), q/k rows as they are, the window, gemma3's local RoPE base, gemma2's caps and the pattern
// as keys (an integer, or with pattern_as_list each layer's flag), the stories260K vocabulary.
void write_gemma_gguf(const fs::path& folder, const fs::path& out, bool pattern_as_list) {
  auto cfg = ModelConfig::load(folder);
  REQUIRE(cfg.ok());
  auto loader = WeightLoader::open(folder);
  REQUIRE(loader.ok());
  test::GgufWriter w;
  const bool gemma3 = cfg->architecture == "Gemma3ForCausalLM";
  const std::string arch = gemma3 ? "gemma3" : "gemma2", a = arch + ".";
  add_shape_keys(w, arch, *cfg);
  w.add_u32(a + "attention.key_length", cfg->head_dim);
  w.add_u32(a + "attention.value_length", cfg->head_dim);
  if (gemma3) {
    w.add_f32(a + "rope.freq_base_swa", cfg->rope_local_theta);
  } else {
    w.add_f32(a + "attn_logit_softcapping", cfg->attn_logit_softcapping);
    w.add_f32(a + "final_logit_softcapping", cfg->final_logit_softcapping);
  }
  w.add_u32(a + "attention.sliding_window", static_cast<uint32_t>(*std::max_element(cfg->sliding_window.begin(),
                                                                                     cfg->sliding_window.end())));
  if (pattern_as_list) {
    std::vector<bool> swa;
    for (int window : cfg->sliding_window) swa.push_back(window > 0);
    w.add_bools(a + "attention.sliding_window_pattern", swa);
  } else {
    w.add_u32(a + "attention.sliding_window_pattern", gemma3 ? 3 : 2);  // the folder's pattern
  }
  add_spm_vocab(w, folder / "tokenizer.json");
  const int h = cfg->hidden_size, hd = cfg->head_dim;
  auto add = [&](const std::string& hf, std::vector<int64_t> shape) {
    auto values = loader->load_f32(hf, shape);
    REQUIRE(values.ok());
    std::vector<float> data = *values;
    if (hf.ends_with("norm.weight")) {
      for (float& x : data) x += 1.0f;
    }
    const auto name = gguf_tensor_name(hf, arch);
    REQUIRE(name);
    w.add_tensor(*name, shape.size() == 2 ? shape[0] : 1, shape.back(), data.data(), GgmlType::f32);
  };
  add("model.embed_tokens.weight", {cfg->vocab_size, h});
  add("model.norm.weight", {h});
  for (int l = 0; l < cfg->num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                             "post_feedforward_layernorm"})
      add(p + norm + ".weight", {h});
    if (gemma3) {
      add(p + "self_attn.q_norm.weight", {hd});
      add(p + "self_attn.k_norm.weight", {hd});
    }
    add_projections(add, *cfg, p);
  }
  if (!cfg->tie_word_embeddings) add("lm_head.weight", {cfg->vocab_size, h});
  w.write(out);
}

std::vector<int32_t> greedy(const fs::path& model_path, int steps) {
  test::CpuRank rank;
  auto cfg = ModelConfig::load(model_path);
  REQUIRE(cfg.ok());
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(model_path));
  REQUIRE(model.ok());
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 64, 8);
  std::vector<uint32_t> table(64);
  for (uint32_t i = 0; i < 64; ++i) table[i] = i;
  return test::greedy_from_bos(**model, kv, rank.backend, table, steps);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A random-weight HF folder of the PyTorch reference's `kind` (tests/reference/hf_reference.py), written into dir.
fs::path reference_folder(const fs::path& dir, const std::string& kind) {
  const std::string script = (test::source_dir() / "tests/reference/hf_reference.py").string();
  const fs::path folder = dir / kind;
  REQUIRE(std::system(("/usr/bin/python3 " + script + " make-model --kind " + kind + " --out " + folder.string() +
                       " > /dev/null 2>&1").c_str()) == 0);
  return folder;
}

// The logits at all 16 positions of a fixed prompt, the model loaded from `model_path` (folder or GGUF).
std::vector<float> sixteen_positions(const fs::path& model_path) {
  test::CpuRank rank;
  auto cfg = ModelConfig::load(model_path);
  if (!cfg) FAIL(cfg.error().message);
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(model_path));
  if (!model) FAIL(model.error().message);
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 8, 4);
  std::vector<uint32_t> table{0, 1, 2, 3, 4, 5, 6, 7};
  ForwardBatch batch;
  batch.tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 40, 41, 42, 43};
  batch.seqs = {SeqSlice{0, int32_t(batch.tokens.size()), 0, table.data(), int32_t(batch.tokens.size())}};
  std::vector<float> logits;
  REQUIRE((*model)->forward(batch, kv, logits, rank.backend));
  return logits;
}

// The largest |got - want| over the largest |want|.
float relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  float worst = 0, largest = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  return worst / largest;
}

// A Phi-3 HF folder (f32, fused qkv_proj and gate_up_proj) as llama.cpp's converter writes it: architecture phi3,
// attn_qkv and ffn_up (gate and up) fused, rope.dimension_count the rotated dimensions, LongRoPE's factors as the
// tensors rope_factors_long / rope_factors_short with rope.scaling.attn_factor and original_context_length, the
// window as attention.sliding_window (0: none); matrices as `type`.
void write_phi3_gguf(const fs::path& folder, const fs::path& out, GgmlType type) {
  auto cfg = ModelConfig::load(folder);
  REQUIRE(cfg.ok());
  auto loader = WeightLoader::open(folder);
  REQUIRE(loader.ok());
  test::GgufWriter w;
  add_shape_keys(w, "phi3", *cfg);
  w.add_u32("phi3.rope.dimension_count", cfg->rotary_dim);
  w.add_u32("phi3.rope.scaling.original_context_length", cfg->rope_scaling.original_max_position_embeddings);
  w.add_f32("phi3.rope.scaling.attn_factor", cfg->rope_scaling.attention_factor);
  w.add_u32("phi3.attention.sliding_window", uint32_t(cfg->sliding_window.front()));
  add_spm_vocab(w, folder / "tokenizer.json");
  const int64_t h = cfg->hidden_size, ff = cfg->intermediate_size,
                qkv = int64_t(cfg->num_heads + 2 * cfg->num_kv_heads) * cfg->head_dim;
  auto add = [&](const std::string& hf, std::vector<int64_t> shape) {
    auto values = loader->load_f32(hf, shape);
    REQUIRE(values.ok());
    const auto name = gguf_tensor_name(hf, "phi3");
    REQUIRE(name);
    w.add_tensor(*name, shape.size() == 2 ? shape[0] : 1, shape.back(), values->data(),
                 shape.size() == 2 ? type : GgmlType::f32);
  };
  add("model.embed_tokens.weight", {cfg->vocab_size, h});
  add("model.norm.weight", {h});
  if (!cfg->tie_word_embeddings) add("lm_head.weight", {cfg->vocab_size, h});
  for (int l = 0; l < cfg->num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "self_attn.qkv_proj.weight", {qkv, h});
    add(p + "self_attn.o_proj.weight", {h, int64_t(cfg->num_heads) * cfg->head_dim});
    add(p + "mlp.gate_up_proj.weight", {2 * ff, h});
    add(p + "mlp.down_proj.weight", {h, ff});
  }
  const auto& rs = cfg->rope_scaling;
  w.add_tensor("rope_factors_long.weight", 1, int64_t(rs.long_factor.size()), rs.long_factor.data(), GgmlType::f32);
  w.add_tensor("rope_factors_short.weight", 1, int64_t(rs.short_factor.size()), rs.short_factor.data(), GgmlType::f32);
  w.write(out);
}

// GGUF row (head, i, j) holds HF row (head, j, i): llama.cpp's interleaved RoPE pairs in a "llama" file's q and k.
std::vector<float> interleaved_qk(const std::vector<float>& values, int64_t rows, int64_t cols, int64_t hd) {
  std::vector<float> data(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / hd, j = (r % hd) / (hd / 2), i = (r % hd) % (hd / 2);
    std::copy_n(values.data() + r * cols, cols, data.data() + (head * hd + 2 * i + j) * cols);
  }
  return data;
}

// A Qwen3, Qwen3-MoE, Qwen2-MoE or Mixtral HF folder (f32) as llama.cpp's converter writes it: architecture `arch`
// (qwen3, qwen3moe, qwen2moe, llama), q/k rows interleaved for a llama file's RoPE (as they are otherwise), q/k norms,
// q/k/v biases, the head size as key_length, each layer's experts stacked (3-D ffn_*_exps) with expert_count /
// expert_used_count / expert_feed_forward_length, a shared expert (ffn_*_shexp, its gate a vector), a YaRN
// rope_scaling as rope.scaling.* keys; 2-D matrices as `type`.
void write_gguf_like_llamacpp(const fs::path& folder, const fs::path& out, const std::string& arch, GgmlType type) {
  auto cfg = ModelConfig::load(folder);
  REQUIRE(cfg.ok());
  auto loader = WeightLoader::open(folder);
  REQUIRE(loader.ok());
  test::GgufWriter w;
  const std::string a = arch + ".";
  add_shape_keys(w, arch, *cfg);
  w.add_u32(a + "attention.key_length", cfg->head_dim);
  w.add_u32(a + "attention.value_length", cfg->head_dim);
  if (cfg->rope_scaling.type == "yarn") {
    w.add_string(a + "rope.scaling.type", "yarn");
    w.add_f32(a + "rope.scaling.factor", cfg->rope_scaling.factor);
    w.add_u32(a + "rope.scaling.original_context_length", cfg->rope_scaling.original_max_position_embeddings);
  }
  const int64_t h = cfg->hidden_size, hd = cfg->head_dim, n_experts = cfg->num_experts;
  if (n_experts > 0) {
    w.add_u32(a + "expert_count", uint32_t(n_experts));
    w.add_u32(a + "expert_used_count", uint32_t(cfg->experts_per_token));
    if (arch != "llama") w.add_u32(a + "expert_feed_forward_length", cfg->moe_intermediate_size);
    if (cfg->shared_expert_intermediate_size > 0)
      w.add_u32(a + "expert_shared_feed_forward_length", cfg->shared_expert_intermediate_size);
  }
  add_spm_vocab(w, folder / "tokenizer.json");
  auto values_of = [&](const std::string& hf, const std::vector<int64_t>& shape) {
    auto values = loader->load_f32(hf, shape);
    REQUIRE(values.ok());
    return *values;
  };
  auto put = [&](const std::string& hf, int64_t rows, int64_t cols, const std::vector<float>& data, int64_t stacked) {
    const auto name = gguf_tensor_name(hf, arch);
    REQUIRE(name);
    const bool matrix = rows > 1 && cols % ggml_block(uint32_t(type))->elements == 0;
    w.add_tensor(*name, rows, cols, data.data(), matrix ? type : GgmlType::f32, stacked);
  };
  auto add = [&](const std::string& hf, std::vector<int64_t> shape) {
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    std::vector<float> data = values_of(hf, shape);
    if (arch == "llama" && (hf.ends_with("q_proj.weight") || hf.ends_with("k_proj.weight")))
      data = interleaved_qk(data, rows, cols, hd);
    put(hf, rows, cols, data, 1);
  };
  add("model.embed_tokens.weight", {cfg->vocab_size, h});
  add("model.norm.weight", {h});
  if (!cfg->tie_word_embeddings) add("lm_head.weight", {cfg->vocab_size, h});
  const bool mixtral = cfg->architecture == "MixtralForCausalLM";
  const int64_t eff = cfg->moe_intermediate_size;
  for (int l = 0; l < cfg->num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    if (cfg->qk_norm) {
      add(p + "self_attn.q_norm.weight", {hd});
      add(p + "self_attn.k_norm.weight", {hd});
    }
    if (n_experts == 0) {
      add_projections(add, *cfg, p);
      continue;
    }
    const int64_t q = int64_t(cfg->num_heads) * hd, kv = int64_t(cfg->num_kv_heads) * hd;
    add(p + "self_attn.q_proj.weight", {q, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, q});
    if (cfg->attention_bias) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    add(moe + "gate.weight", {n_experts, h});
    if (const int64_t sff = cfg->shared_expert_intermediate_size; sff > 0) {
      add(moe + "shared_expert.gate_proj.weight", {sff, h});
      add(moe + "shared_expert.up_proj.weight", {sff, h});
      add(moe + "shared_expert.down_proj.weight", {h, sff});
      put(moe + "shared_expert_gate.weight", 1, h, values_of(moe + "shared_expert_gate.weight", {1, h}), 1);
    }
    const std::vector<std::pair<std::string, bool>> stacks =  // (name, is down)
        mixtral ? std::vector<std::pair<std::string, bool>>{{"w1", false}, {"w3", false}, {"w2", true}}
                : std::vector<std::pair<std::string, bool>>{{"gate_proj", false}, {"up_proj", false}, {"down_proj", true}};
    for (const auto& [part, down] : stacks) {
      std::vector<float> stacked;
      for (int64_t e = 0; e < n_experts; ++e) {
        const auto one = values_of(moe + "experts." + std::to_string(e) + "." + part + ".weight",
                                   down ? std::vector<int64_t>{h, eff} : std::vector<int64_t>{eff, h});
        stacked.insert(stacked.end(), one.begin(), one.end());
      }
      put(moe + "experts." + part + ".weight", n_experts * (down ? h : eff), down ? eff : h, stacked, n_experts);
    }
  }
  w.write(out);
}

}  // namespace

TEST_CASE("each GGUF block format decodes to its values", "[gguf]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  test::TempDir dir;
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q4_k,
                        GgmlType::q6_k}) {
    INFO(ggml_type_name(type));
    const int64_t rows = 3, cols = 512;
    std::vector<float> values(rows * cols);
    for (float& x : values) x = dist(rng);
    test::GgufWriter w;
    w.add_tensor("t", rows, cols, values.data(), type);
    w.write(dir.path() / "t.gguf");
    auto f = GgufFile::open(dir.path() / "t.gguf");
    REQUIRE(f.ok());
    const GgufTensor* t = f->tensor("t");
    REQUIRE(t);
    CHECK(t->rows() == rows);
    CHECK(t->cols() == cols);
    auto decoded = gguf_values_f32(*t);
    REQUIRE(decoded.ok());
    // Q8_0, Q4_0 and Q5_0 exactly; Q5_1's codes exactly, its d q + m summed in f32 where the reference sums in
    // double; Q4_K and Q6_K with their d * sc products rounded to f16 (2^-11 of the step's scale).
    const bool exact = type == GgmlType::q8_0 || type == GgmlType::q4_0 || type == GgmlType::q5_0;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(values.begin() + r * cols, values.begin() + (r + 1) * cols);
      const auto expected = test::GgufWriter::round_trip(row, type);
      float max_abs = 0;
      for (float x : expected) max_abs = std::max(max_abs, std::abs(x));
      for (int64_t c = 0; c < cols; ++c) {
        const float got = (*decoded)[r * cols + c];
        if (exact) REQUIRE(got == expected[c]);
        else REQUIRE(std::abs(got - expected[c]) <= std::ldexp(max_abs, -9));
        // and near the original value: half a step, one for a 4-bit code clamped at 15
        const float step = type == GgmlType::q8_0                                ? 1 / 127.0f
                           : type == GgmlType::q6_k                              ? 1 / 31.0f
                           : type == GgmlType::q5_0 || type == GgmlType::q5_1 ? 1 / 15.0f
                                                                                 : 1 / 7.0f;
        REQUIRE(std::abs(got - row[c]) <= step * max_abs + 1e-6f);
      }
    }
  }
}

TEST_CASE("malformed GGUF files are refused with the file and the reason", "[gguf]") {
  test::TempDir dir;
  std::vector<float> values(64, 0.5f);
  test::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_tensor("t", 2, 32, values.data(), GgmlType::q8_0);
  w.write(dir.path() / "good.gguf");
  const std::string good = read_bytes(dir.path() / "good.gguf");
  REQUIRE(GgufFile::open(dir.path() / "good.gguf").ok());
  auto attempt = [&](const std::string& bytes) {
    test::write_file(dir.path() / "bad.gguf", bytes);
    auto f = GgufFile::open(dir.path() / "bad.gguf");
    REQUIRE_FALSE(f.ok());
    CHECK_THAT(f.error().message, Catch::Contains("bad.gguf"));
    return f.error().message;
  };
  CHECK_THAT(attempt("GGUF"), Catch::Contains("too short"));
  CHECK_THAT(attempt("GGML" + good.substr(4)), Catch::Contains("magic"));
  std::string v9 = good;
  v9[4] = 9;
  CHECK_THAT(attempt(v9), Catch::Contains("version 9"));
  CHECK_THAT(attempt(good.substr(0, 60)), Catch::Contains("truncated"));
  CHECK_THAT(attempt(good.substr(0, good.size() - 40)), Catch::Contains("outside the file"));
  std::string huge_string = good;  // the first key's length
  huge_string[24 + 7] = 0x7F;
  CHECK_THAT(attempt(huge_string), Catch::Contains("string of"));
  std::string unknown_type = good;
  const size_t type_at = good.find("t", 24 + 8 + 20 + 4 + 8 + 5) ;  // the tensor name, then n_dims, dims, type
  REQUIRE(type_at != std::string::npos);
  unknown_type[type_at + 1 + 4 + 16] = 99;
  CHECK_THAT(attempt(unknown_type), Catch::Contains("ggml type 99"));
  std::string huge_dims = good;  // 2^40 x 2^40 elements (found by the fuzzer: the product overflowed)
  for (int d = 0; d < 2; ++d) {
    const uint64_t dim = 1ull << 40;
    std::memcpy(&huge_dims[type_at + 1 + 4 + 8 * d], &dim, 8);
  }
  CHECK_THAT(attempt(huge_dims), Catch::Contains("more than 2^50 elements"));
  CHECK_FALSE(GgufFile::is_gguf(dir.path()));
  CHECK_FALSE(ModelConfig::load(dir.path() / "good.gguf").ok());  // no llama.* keys: names the missing key
  CHECK_THAT(ModelConfig::load(dir.path() / "good.gguf").error().message, Catch::Contains("llama.embedding_length"));
}

// Found by the fuzzer: a token type of 4294967295 was cast to int (undefined); unknown types now read as normal.
TEST_CASE("a GGUF token type out of every range is read as a normal token", "[gguf][tokenizer]") {
  std::ifstream in(test::source_dir() / "fuzz/corpus/gguf/ub_token_type_out_of_range", std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto file = GgufFile::from_bytes(bytes, "ub_token_type_out_of_range");
  REQUIRE(file.ok());
  (void)tokenizer_documents_from_gguf(*file);  // an answer either way, without undefined behaviour
  test::GgufWriter w;
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "a"});
  w.add_i32s("tokenizer.ggml.token_type", {2, 3, 99});
  w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  test::TempDir dir;
  w.write(dir.path() / "v.gguf");
  auto tok = Tokenizer::load(dir.path() / "v.gguf");
  REQUIRE(tok.ok());
  CHECK_FALSE(tok->is_special(2));
  auto chat = load_chat_template(dir.path() / "v.gguf");  // the template of the file's metadata
  REQUIRE(chat.ok());
  CHECK(*chat->render(nlohmann::json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}) == "hi");
}

TEST_CASE("a GGUF vocabulary tokenizes as its HF tokenizer.json - SentencePiece and byte-level", "[gguf][tokenizer]") {
  const auto corpus = read_json(kFixtures / "corpus.json").get<std::vector<std::string>>();
  test::TempDir dir;
  // Byte-level vocabularies with llama.cpp's pre-tokenizer names; GPT-4o's o200k (Phi-4-mini's, "gpt-4o") where the
  // local conformance fixtures are (ACTORD_TOKENIZER_CONFORMANCE_EXTRA, tests/fixtures/tokenizers/make_fixtures.js).
  std::map<std::string, std::pair<fs::path, std::string>> byte_level{{"qwen3", {kFixtures / "qwen3", "qwen2"}},
                                                                     {"gpt2", {kFixtures / "gpt2", "gpt-2"}}};
  if (const char* extra = std::getenv("ACTORD_TOKENIZER_CONFORMANCE_EXTRA");
      extra && *extra && fs::exists(fs::path(extra) / "gpt4o" / "expected.json"))
    byte_level["gpt4o"] = {fs::path(extra) / "gpt4o", "gpt-4o"};
  for (const std::string name : {"stories260K", "qwen3", "gpt2", "gpt4o"}) {
    if (name != "stories260K" && !byte_level.count(name)) continue;
    INFO(name);
    const fs::path folder = name == "stories260K" ? test::stories_dir() : byte_level.at(name).first;
    const auto tj = read_json(folder / "tokenizer.json");
    const Vocab v = vocab_of(tj);
    test::GgufWriter w;
    if (name == "stories260K") {
      std::vector<float> scores;
      for (size_t i = 0; i < v.tokens.size(); ++i) scores.push_back(v.types[i] == 1 ? -float(i) : 0.0f);
      w.add_string("tokenizer.ggml.model", "llama");
      w.add_f32s("tokenizer.ggml.scores", scores);
      w.add_u32("tokenizer.ggml.bos_token_id", 1);
      w.add_u32("tokenizer.ggml.eos_token_id", 2);
      w.add_u32("tokenizer.ggml.unknown_token_id", 0);
    } else {
      std::vector<std::string> merges;
      for (const auto& m : tj["model"]["merges"]) {
        merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
      }
      w.add_string("tokenizer.ggml.model", "gpt2");
      w.add_string("tokenizer.ggml.pre", byte_level.at(name).second);
      w.add_strings("tokenizer.ggml.merges", merges);
      w.add_bool("tokenizer.ggml.add_bos_token", false);
    }
    w.add_strings("tokenizer.ggml.tokens", v.tokens);
    w.add_i32s("tokenizer.ggml.token_type", v.types);
    const fs::path path = dir.path() / (name + ".gguf");
    w.write(path);
    auto from_gguf = Tokenizer::load(path);
    REQUIRE(from_gguf.ok());
    const auto expected = read_json((name == "stories260K" ? kFixtures / name : folder) / "expected.json");
    REQUIRE(expected["ids"].size() == corpus.size());
    for (size_t i = 0; i < corpus.size(); ++i) {
      INFO("string " << i);
      REQUIRE(from_gguf->encode(corpus[i]) == expected["ids"][i].get<std::vector<int32_t>>());
    }
  }
}

TEST_CASE("stories260K from GGUF generates as from its folder - f32 exactly - Q8_0 and Q4_0 within bounds",
          "[gguf][model]") {
  test::TempDir dir;
  const auto reference = test::reference_ids();
  write_stories_gguf(dir.path() / "f32.gguf", GgmlType::f32);
  auto from_gguf = ModelConfig::load(dir.path() / "f32.gguf");
  REQUIRE(from_gguf.ok());
  CHECK(from_gguf->architecture == "LlamaForCausalLM");
  CHECK(from_gguf->head_dim == 8);
  CHECK(from_gguf->tie_word_embeddings);
  const auto f32 = greedy(dir.path() / "f32.gguf", 256);
  CHECK(std::equal(f32.begin(), f32.end(), reference.begin()));
  for (auto [type, min_agree] : {std::pair{GgmlType::q8_0, 56}, {GgmlType::q4_0, 8}}) {
    const fs::path path = dir.path() / (std::string(ggml_type_name(type)) + ".gguf");
    write_stories_gguf(path, type);
    const auto tokens = greedy(path, 64);
    int agree = 0;
    while (agree < 64 && tokens[agree] == reference[agree]) ++agree;
    std::printf("stories260K %s GGUF: greedy agreement with the f32 reference %d/64\n", ggml_type_name(type), agree);
    CHECK(agree >= min_agree);
  }
}

TEST_CASE("Gemma 3 and Gemma 2 GGUFs as llama.cpp writes them give the logits of their HF folders - the window "
          "pattern as a number or a list", "[gguf][model]") {
  test::TempDir dir;
  const auto run = sixteen_positions;
  for (const std::string kind : {"gemma3", "gemma2"}) {
    INFO(kind);
    const fs::path folder = reference_folder(dir.path(), kind);
    {  // llama.cpp scales queries by head_dim^-1/2 (a GGUF cannot say otherwise below 27B): the folder too
      nlohmann::json j = read_json(folder / "config.json");
      j["query_pre_attn_scalar"] = j["head_dim"];
      test::write_file(folder / "config.json", j.dump());
    }
    const std::vector<float> want = run(folder);
    for (bool as_list : {false, true}) {
      INFO("pattern as a list: " << as_list);
      const fs::path gguf = dir.path() / (kind + (as_list ? "-list.gguf" : "-number.gguf"));
      write_gemma_gguf(folder, gguf, as_list);
      auto cfg = ModelConfig::load(gguf);
      REQUIRE(cfg.ok());
      auto folder_cfg = ModelConfig::load(folder);
      REQUIRE(folder_cfg.ok());
      CHECK(cfg->architecture == folder_cfg->architecture);
      CHECK(cfg->sliding_window == folder_cfg->sliding_window);
      CHECK(cfg->rope_local_theta == folder_cfg->rope_local_theta);
      CHECK(cfg->attn_logit_softcapping == folder_cfg->attn_logit_softcapping);
      CHECK(cfg->final_logit_softcapping == folder_cfg->final_logit_softcapping);
      CHECK(cfg->query_pre_attn_scalar == float(cfg->head_dim));
      CHECK(cfg->tie_word_embeddings == folder_cfg->tie_word_embeddings);
      // The norms' (1 + w) - 1 + 1 round trip may move them an ulp: every logit of all 16 positions within 1e-5.
      CHECK(relative_error(run(gguf), want) <= 1e-5f);
    }
  }
  // A pattern list of the wrong length names the key.
  {
    test::GgufWriter w;
    w.add_string("general.architecture", "gemma3");
    for (const char* key : {"block_count", "embedding_length", "feed_forward_length", "attention.head_count"})
      w.add_u32(std::string("gemma3.") + key, 4);
    w.add_u32("gemma3.attention.sliding_window", 8);
    w.add_bools("gemma3.attention.sliding_window_pattern", {true, false});
    std::vector<float> embedding(16 * 4, 0.5f);
    w.add_tensor("token_embd.weight", 16, 4, embedding.data(), GgmlType::f32);
    w.write(dir.path() / "bad.gguf");
    auto cfg = ModelConfig::load(dir.path() / "bad.gguf");
    REQUIRE_FALSE(cfg.ok());
    CHECK_THAT(cfg.error().message, Catch::Contains("gemma3.attention.sliding_window_pattern lists 2 layers, block_count is 4"));
  }
}

// Through the engine, as `actord generate --model stories260K-Q8_0.gguf` runs it: config, tokenizer and weights from
// the one file, the worker in its own process (the file's path crosses to it), text in and text out.
TEST_CASE("Phi-3 GGUFs as llama.cpp writes them give the logits of their HF folders - fused qkv and gate/up, "
          "partial rotary, LongRoPE's factor tensors - f32 exactly and Q8_0 within bounds", "[gguf][model]") {
  test::TempDir dir;
  for (const std::string kind : {"phi3", "phi3-partial"}) {
    INFO(kind);
    const fs::path folder = reference_folder(dir.path(), kind);
    const std::vector<float> want = sixteen_positions(folder);
    auto folder_cfg = ModelConfig::load(folder);
    REQUIRE(folder_cfg.ok());
    for (GgmlType type : {GgmlType::f32, GgmlType::q8_0}) {
      INFO(ggml_type_name(type));
      const fs::path gguf = dir.path() / (kind + "-" + ggml_type_name(type) + ".gguf");
      write_phi3_gguf(folder, gguf, type);
      auto cfg = ModelConfig::load(gguf);
      REQUIRE(cfg.ok());
      CHECK(cfg->architecture == "Phi3ForCausalLM");
      CHECK(cfg->rotary_dim == folder_cfg->rotary_dim);
      CHECK(cfg->sliding_window == folder_cfg->sliding_window);
      CHECK(cfg->tie_word_embeddings == folder_cfg->tie_word_embeddings);
      CHECK(cfg->rope_scaling.type == "longrope");
      CHECK(cfg->rope_scaling.long_factor == folder_cfg->rope_scaling.long_factor);
      CHECK(cfg->rope_scaling.short_factor == folder_cfg->rope_scaling.short_factor);
      CHECK(cfg->rope_scaling.original_max_position_embeddings ==
            folder_cfg->rope_scaling.original_max_position_embeddings);
      CHECK(cfg->rope_scaling.attention_factor == Approx(folder_cfg->rope_scaling.attention_factor));
      CHECK(cfg->rope_inv_freq() == folder_cfg->rope_inv_freq());
      // f32: the same values, every logit within 1e-5. Q8_0 (the fused tensors' parts cut out of whole blocks of
      // codes, multiplied with int8 activations; measured 3.1% and 5.9% on these tiny random models) within 10% of
      // the largest logit. Which rows each part takes is checked against PyTorch on the folders
      // (hf_reference_test.cpp: a part one head off fails every Phi-3 case there).
      CHECK(relative_error(sixteen_positions(gguf), want) <= (type == GgmlType::f32 ? 1e-5f : 0.1f));
    }
  }
  // One factor tensor without the other is refused naming both.
  const fs::path folder = dir.path() / "phi3";
  const fs::path broken = dir.path() / "one-factor.gguf";
  {
    test::GgufWriter w;
    w.add_string("general.architecture", "phi3");
    for (const char* key : {"block_count", "embedding_length", "feed_forward_length", "attention.head_count"})
      w.add_u32(std::string("phi3.") + key, 4);
    std::vector<float> embedding(16 * 4, 0.5f), factors(1, 1.0f);
    w.add_tensor("token_embd.weight", 16, 4, embedding.data(), GgmlType::f32);
    w.add_tensor("rope_factors_long.weight", 1, 1, factors.data(), GgmlType::f32);
    w.write(broken);
  }
  auto cfg = ModelConfig::load(broken);
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().message == broken.string() + ": rope_factors_long.weight and rope_factors_short.weight come "
                                                 "together (LongRoPE), found one");
}

TEST_CASE("Qwen3 GGUFs as llama.cpp writes them give the logits of their HF folders - q/k norms, YaRN from "
          "rope.scaling keys", "[gguf][model]") {
  test::TempDir dir;
  const fs::path folder = reference_folder(dir.path(), "qwen3");
  for (bool yarn : {false, true}) {
    INFO("yarn: " << yarn);
    if (yarn) {  // Qwen's long-context setting: YaRN factor 4 over a pretrained 64
      nlohmann::json j = read_json(folder / "config.json");
      j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
      test::write_file(folder / "config.json", j.dump());
    }
    const fs::path gguf = dir.path() / (yarn ? "qwen3-yarn.gguf" : "qwen3.gguf");
    write_gguf_like_llamacpp(folder, gguf, "qwen3", GgmlType::f32);
    auto cfg = ModelConfig::load(gguf);
    REQUIRE(cfg.ok());
    auto folder_cfg = ModelConfig::load(folder);
    REQUIRE(folder_cfg.ok());
    CHECK(cfg->architecture == "Qwen3ForCausalLM");
    CHECK(cfg->qk_norm);
    CHECK(cfg->rope_scaling.type == folder_cfg->rope_scaling.type);
    CHECK(cfg->rope_inv_freq() == folder_cfg->rope_inv_freq());
    CHECK(cfg->rope_attention_factor() == Approx(folder_cfg->rope_attention_factor()));
    CHECK(relative_error(sixteen_positions(gguf), sixteen_positions(folder)) <= 1e-5f);
  }
}

TEST_CASE("mixture-of-experts GGUFs as llama.cpp writes them give the logits of their HF folders - Mixtral (llama), "
          "Qwen3-MoE and Qwen2-MoE (a shared expert, q/k/v biases), experts stacked, f32 exactly and Q8_0 within bounds",
          "[gguf][model]") {
  test::TempDir dir;
  for (auto [kind, arch] :
       {std::pair{"mixtral-4x2", "llama"}, {"qwen3-moe-sparse", "qwen3moe"}, {"qwen2-moe", "qwen2moe"}}) {
    INFO(kind);
    const fs::path folder = reference_folder(dir.path(), kind);
    const std::vector<float> want = sixteen_positions(folder);
    auto folder_cfg = ModelConfig::load(folder);
    REQUIRE(folder_cfg.ok());
    // Q8_0 for Qwen3-MoE only: this tiny random Mixtral's top-2 routing has near-ties that int8 weights and
    // activations flip (its Q8_0 logits are up to 41% off the f32 folder's, the same with and without each expert's
    // rows cut out before decoding); its f32 file checks the stacks exactly.
    const bool mixtral = std::string(kind) == "mixtral-4x2";
    for (GgmlType type : {GgmlType::f32, GgmlType::q8_0}) {
      if (mixtral && type == GgmlType::q8_0) continue;
      INFO(ggml_type_name(type));
      const fs::path gguf = dir.path() / (std::string(kind) + "-" + ggml_type_name(type) + ".gguf");
      write_gguf_like_llamacpp(folder, gguf, arch, type);
      auto cfg = ModelConfig::load(gguf);
      REQUIRE(cfg.ok());
      CHECK(cfg->architecture == folder_cfg->architecture);
      CHECK(cfg->num_experts == folder_cfg->num_experts);
      CHECK(cfg->experts_per_token == folder_cfg->experts_per_token);
      CHECK(cfg->moe_intermediate_size == folder_cfg->moe_intermediate_size);
      CHECK(cfg->norm_topk_prob == folder_cfg->norm_topk_prob);
      CHECK(cfg->sparse_layers == folder_cfg->sparse_layers);
      CHECK(cfg->shared_expert_intermediate_size == folder_cfg->shared_expert_intermediate_size);
      CHECK(cfg->attention_bias == folder_cfg->attention_bias);
      // f32: every logit within 1e-5; Q8_0 (each expert's rows cut out of its stack before decoding) within 10%.
      CHECK(relative_error(sixteen_positions(gguf), want) <= (type == GgmlType::f32 ? 1e-5f : 0.1f));
    }
  }
  // Experts of another architecture are refused by name.
  const fs::path other = dir.path() / "qwen2-experts.gguf";
  {
    test::GgufWriter w;
    w.add_string("general.architecture", "qwen2");
    w.add_u32("qwen2.expert_count", 4);
    w.write(other);
  }
  auto cfg = ModelConfig::load(other);
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().message == other.string() + ": mixture-of-experts GGUF files of 'qwen2' are not supported "
                                                "(llama as Mixtral, qwen2moe, qwen3moe are); load the HF folder");
}

TEST_CASE("the engine serves a GGUF file - prompt text encoded by its vocabulary - worker in its own process",
          "[gguf][engine]") {
  test::TempDir dir;
  write_stories_gguf(dir.path() / "f32.gguf", GgmlType::f32);
  write_stories_gguf(dir.path() / "q8.gguf", GgmlType::q8_0);
  for (const std::string file : {"f32.gguf", "q8.gguf"}) {
    INFO(file);
    auto cfg = test::quickstart("configs/quickstart.yaml", {"groups[0].placement=process"});
    cfg.model.path = dir.path() / file;
    auto engine = test::start_engine(cfg);
    GenerateRequest from_bos;
    from_bos.prompt_ids = {1};
    from_bos.max_tokens = 64;
    from_bos.sampling.temperature = 0.0f;
    GenerateRequest text;
    text.prompt = "Once upon a time";
    text.max_tokens = 16;
    text.sampling.temperature = 0.0f;
    auto out = engine->generate({from_bos, text});
    REQUIRE(out.ok());
    const auto reference = test::reference_ids();
    if (file == "f32.gguf") {
      CHECK(std::equal((*out)[0].generated_ids.begin(), (*out)[0].generated_ids.end(), reference.begin()));
    }
    CHECK((*out)[1].prompt_ids.front() == 1);  // BOS from the file's add_bos_token
    CHECK_THAT((*out)[1].text, Catch::StartsWith(", there was a little girl"));
  }
}
