#include "plugins/model_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/gguf.hpp"
#include "core/kv_rows.hpp"
#include "executors/cpu/kernels.hpp"
#include "plugins/gguf_model.hpp"

namespace actord {

size_t ModelConfig::kv_bytes_per_token(DType kv_dtype) const {
  return actord::kv_bytes_per_token(kv_dtype, num_layers, num_kv_heads, head_dim);
}

DType ModelConfig::kv_cache_dtype(const std::string& kv_setting, const std::string& model_dtype_setting,
                                  const std::string& torch_dtype) {
  if (kv_setting != "auto") return parse_kv_dtype(kv_setting).value_or(DType::f32);
  for (const std::string* name : {&model_dtype_setting, &torch_dtype}) {
    if (*name == "auto") continue;
    return parse_dtype(*name).value_or(DType::f32);
  }
  return DType::f32;
}

namespace {

using nlohmann::json;

// A config.json value that fails its check: the key's path and what is wrong. Thrown by Fields, caught by load().
struct FieldError {
  std::string key;
  std::string message;
  Errc code = Errc::parse_error;
};

// The fields of one JSON object of config.json (the top level, rope_scaling), each read with its checks. An absent
// key and a null value both mean "not set", as in HF's config classes.
class Fields {
 public:
  Fields(const json& object, std::string prefix) : j_(object), prefix_(std::move(prefix)) {}

  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  bool present(const std::string& key) const { return j_.contains(key); }
  const json& at(const std::string& key) const { return j_.at(key); }
  std::string path(const std::string& key) const { return prefix_ + key; }

  // A JSON integer in [min, max]: `fallback` when not set, "missing" when there is none.
  int64_t integer(const std::string& key, int64_t min, int64_t max, std::optional<int64_t> fallback = {}) const {
    if (!has(key)) {
      if (!fallback) throw FieldError{path(key), "missing"};
      return *fallback;
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer()) throw FieldError{path(key), "must be an integer, got " + v.dump()};
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) : true;
    const int64_t i = fits ? v.get<int64_t>() : INT64_MAX;
    if (!fits || i < min || i > max) {
      throw FieldError{path(key), "must be an integer between " + std::to_string(min) + " and " + std::to_string(max) +
                                      ", got " + v.dump()};
    }
    return i;
  }
  int int32(const std::string& key, int64_t min, int64_t max, std::optional<int64_t> fallback = {}) const {
    return static_cast<int>(integer(key, min, std::min<int64_t>(max, INT32_MAX), fallback));
  }

  // A JSON number that is finite as a float and passes `valid`, which `rule` describes ("must be ...").
  float real(const std::string& key, float fallback, bool (*valid)(float), const char* rule) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number()) throw FieldError{path(key), std::string(rule) + ", got " + v.dump()};
    const double d = v.get<double>();
    const bool finite = std::isfinite(d) && std::abs(d) <= std::numeric_limits<float>::max();
    if (!finite || !valid(static_cast<float>(d))) throw FieldError{path(key), std::string(rule) + ", got " + v.dump()};
    return static_cast<float>(d);
  }

  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) throw FieldError{path(key), "must be true or false, got " + v.dump()};
    return v.get<bool>();
  }

  std::string text(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) throw FieldError{path(key), "must be a string, got " + v.dump()};
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string prefix_;
};

bool positive(float v) { return v > 0.0f; }
bool between_0_and_1(float v) { return v > 0.0f && v < 1.0f; }
constexpr const char* kPositive = "must be a finite positive number";

// config.json's `sliding_window`: 0 when null; `absent` when the key is missing.
int window_value(const Fields& f, int absent) {
  if (!f.present("sliding_window")) return absent;
  return f.has("sliding_window") ? f.int32("sliding_window", 1, INT32_MAX) : 0;
}

// The windows of the layers config.json's `layer_types` marks "sliding_attention" (the others "full_attention").
std::vector<int> windows_of_layer_types(const Fields& f, int num_layers, int window) {
  std::vector<int> windows(static_cast<size_t>(num_layers), 0);
  const json& types = f.at("layer_types");
  if (!types.is_array() || types.size() != static_cast<size_t>(num_layers)) {
    throw FieldError{f.path("layer_types"), "must be a list of num_hidden_layers (" + std::to_string(num_layers) +
                                                ") names, got " + types.dump().substr(0, 200)};
  }
  for (int l = 0; l < num_layers; ++l) {
    const json& t = types[static_cast<size_t>(l)];
    if (t == "sliding_attention") windows[static_cast<size_t>(l)] = window;
    else if (t != "full_attention") {
      throw FieldError{f.path("layer_types") + "[" + std::to_string(l) + "]",
                       "must be full_attention or sliding_attention, got " + t.dump(), Errc::unsupported};
    }
  }
  return windows;
}

// Each layer's attention window by HF's rule for the architecture (ModelConfig::sliding_window states it).
std::vector<int> sliding_windows(const Fields& f, const std::string& arch, int num_layers) {
  std::vector<int> windows(static_cast<size_t>(num_layers), 0);
  if (arch == "LlamaForCausalLM") return windows;
  if (arch == "Qwen2ForCausalLM" || arch == "Qwen2MoeForCausalLM" || arch == "Qwen3ForCausalLM" ||
      arch == "Qwen3MoeForCausalLM") {
    // Qwen2Config: sliding_window only with use_sliding_window; layer_types, else layers from max_window_layers on.
    if (!f.boolean("use_sliding_window", false)) return windows;
    const int window = window_value(f, 4096);
    if (window == 0) return windows;
    if (f.has("layer_types")) return windows_of_layer_types(f, num_layers, window);
    const int first = f.int32("max_window_layers", 0, INT32_MAX, 28);
    for (int l = first; l < num_layers; ++l) windows[static_cast<size_t>(l)] = window;
    return windows;
  }
  if (arch == "Gemma3ForCausalLM" || arch == "Gemma2ForCausalLM") {
    // Gemma3TextConfig / Gemma2Config: layer_types, else every layer sliding but each sliding_window_pattern-th (6;
    // Gemma 2 every second).
    const int window = window_value(f, 4096);
    if (window == 0) return windows;
    if (f.has("layer_types")) return windows_of_layer_types(f, num_layers, window);
    const int pattern =
        f.int32("sliding_window_pattern", 1, ModelConfig::kMaxCount, arch == "Gemma2ForCausalLM" ? 2 : 6);
    for (int l = 0; l < num_layers; ++l) windows[static_cast<size_t>(l)] = (l + 1) % pattern != 0 ? window : 0;
    return windows;
  }
  int window = 0;
  if (arch == "MistralForCausalLM") window = window_value(f, 4096);  // MistralConfig's default
  else if (arch == "MixtralForCausalLM") window = window_value(f, 0);
  else if (f.boolean("use_sliding_window", true)) window = window_value(f, 0);
  std::fill(windows.begin(), windows.end(), window);
  return windows;
}

// Gemma 2's and Gemma 3's own keys (Gemma2Config, Gemma3TextConfig and their defaults). Bidirectional attention
// (EmbeddingGemma) is refused by name.
void read_gemma(const Fields& f, ModelConfig& c, bool gemma3) {
  c.hidden_act = f.text("hidden_activation", f.text("hidden_act", "gelu_pytorch_tanh"));
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  c.rms_norm_eps = f.real("rms_norm_eps", 1e-6f, &between_0_and_1, "must be a number above 0 and below 1");
  c.rope_theta = f.real("rope_theta", gemma3 ? 1e6f : 10000.0f, &positive, kPositive);
  if (gemma3) c.rope_local_theta = f.real("rope_local_base_freq", 10000.0f, &positive, kPositive);
  c.query_pre_attn_scalar = f.real("query_pre_attn_scalar", 256.0f, &positive, kPositive);
  c.max_position_embeddings =
      f.int32("max_position_embeddings", 1, ModelConfig::kMaxPositions, gemma3 ? 131072 : 8192);
  // Gemma2Config's defaults cap both (absent: 50 and 30), Gemma3TextConfig's neither; null turns a cap off.
  auto cap = [&](const char* key, float gemma2_default) {
    if (f.present(key) && !f.has(key)) return 0.0f;
    return f.real(key, gemma3 ? 0.0f : gemma2_default, &positive, kPositive);
  };
  c.attn_logit_softcapping = cap("attn_logit_softcapping", 50.0f);
  c.final_logit_softcapping = cap("final_logit_softcapping", 30.0f);
  if (f.boolean("use_bidirectional_attention", false)) {
    throw FieldError{"use_bidirectional_attention", "bidirectional attention (an embedding model) is not supported",
                     Errc::unsupported};
  }
}

// A list of `n` positive numbers (longrope's factors).
std::vector<float> positive_list(const Fields& f, const std::string& key, int n) {
  if (!f.has(key)) {
    throw FieldError{f.path(key), "missing (a list of rotary_dim / 2 = " + std::to_string(n) + " numbers)"};
  }
  const json& v = f.at(key);
  if (!v.is_array() || v.size() != static_cast<size_t>(n)) {
    throw FieldError{f.path(key), "must be a list of rotary_dim / 2 = " + std::to_string(n) + " numbers, got " +
                                      v.dump().substr(0, 200)};
  }
  std::vector<float> out;
  for (const json& x : v) {
    const double d = x.is_number() ? x.get<double>() : -1.0;
    if (!(d > 0.0 && d <= std::numeric_limits<float>::max())) {
      throw FieldError{f.path(key), "must hold finite positive numbers, got " + x.dump()};
    }
    out.push_back(static_cast<float>(d));
  }
  return out;
}

// HF's yarn mscale: 0.1 m ln(scale) + 1 above scale 1.
float yarn_mscale(float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; }

// partial_rotary_factor and rope_scaling (ModelConfig::rotary_dim, RopeScaling say what each means).
void read_rotary(const Fields& f, const json& j, ModelConfig& c) {
  const float partial = f.real("partial_rotary_factor", 1.0f, [](float v) { return v > 0.0f && v <= 1.0f; },
                               "must be a number above 0 and at most 1");
  // HF truncates head_dim x factor; the small margin keeps a factor written as rotated / head_dim (a GGUF's) whole.
  c.rotary_dim = static_cast<int>(static_cast<double>(c.head_dim) * partial + 1e-3);
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
    throw FieldError{"partial_rotary_factor", "times head_dim (" + std::to_string(c.head_dim) + ") must give an even "
                                              "number of rotated dimensions, got " + std::to_string(c.rotary_dim)};
  }
  if (!f.has("rope_scaling")) return;
  const json& rs = j.at("rope_scaling");
  if (!rs.is_object()) throw FieldError{"rope_scaling", "must be an object or null, got " + rs.dump().substr(0, 200)};
  const Fields r(rs, "rope_scaling.");
  ModelConfig::RopeScaling& s = c.rope_scaling;
  s.type = r.has("rope_type") ? r.text("rope_type", "") : r.text("type", "");
  if (s.type == "default") s.type.clear();
  if (s.type == "su") s.type = "longrope";  // Phi-3's first configs
  if (!s.type.empty() && s.type != "linear" && s.type != "llama3" && s.type != "longrope" && s.type != "yarn") {
    throw FieldError{"rope_scaling", "type '" + s.type + "' is not supported (linear, llama3, longrope, yarn)",
                     Errc::unsupported};
  }
  s.factor = r.real("factor", 1.0f, &positive, kPositive);
  s.low_freq_factor = r.real("low_freq_factor", 1.0f, &positive, kPositive);
  s.high_freq_factor = r.real("high_freq_factor", 4.0f, &positive, kPositive);
  s.original_max_position_embeddings = r.int32("original_max_position_embeddings", 1, ModelConfig::kMaxPositions,
                                               s.type == "llama3" ? 8192 : c.max_position_embeddings);
  if (s.type == "llama3" && !(s.high_freq_factor > s.low_freq_factor)) {
    throw FieldError{"rope_scaling.high_freq_factor", "must be greater than low_freq_factor (llama3 divides by "
                                                      "their difference)"};
  }
  const float attention_factor = r.real("attention_factor", 0.0f, &positive, kPositive);
  if (s.type == "longrope") {
    // HF: Phi-3 keeps the pretrained context at the top level (Phi3Config: default 4096) and scales by the ratio.
    const bool top = f.has("original_max_position_embeddings") || c.architecture == "Phi3ForCausalLM";
    if (top) {
      s.original_max_position_embeddings =
          f.int32("original_max_position_embeddings", 1, ModelConfig::kMaxPositions, 4096);
    }
    if (top || r.has("original_max_position_embeddings")) {
      s.factor =
          static_cast<float>(static_cast<double>(c.max_position_embeddings) / s.original_max_position_embeddings);
    }
    s.short_factor = positive_list(r, "short_factor", c.rotary_dim / 2);
    s.long_factor = positive_list(r, "long_factor", c.rotary_dim / 2);
    const double ratio = std::log(double(s.factor)) / std::log(double(s.original_max_position_embeddings));
    s.attention_factor = attention_factor > 0.0f ? attention_factor
                         : s.factor <= 1.0f      ? 1.0f
                                                 : static_cast<float>(std::sqrt(1.0 + ratio));
  } else if (s.type == "yarn") {
    s.beta_fast = r.real("beta_fast", 32.0f, &positive, kPositive);
    s.beta_slow = r.real("beta_slow", 1.0f, &positive, kPositive);
    s.truncate = r.boolean("truncate", true);
    const float mscale = r.real("mscale", 0.0f, &positive, kPositive);
    const float mscale_all_dim = r.real("mscale_all_dim", 0.0f, &positive, kPositive);
    s.attention_factor = attention_factor > 0.0f ? attention_factor
                         : mscale > 0.0f && mscale_all_dim > 0.0f
                             ? yarn_mscale(s.factor, mscale) / yarn_mscale(s.factor, mscale_all_dim)
                             : yarn_mscale(s.factor, 1.0f);
  }
}

ModelConfig read_config(const json& j);

// Gemma 3's multimodal checkpoints (4B and up): the text model of text_config, with Gemma3TextConfig's defaults for
// what it leaves out (those configs give little more than the sizes that differ), its tensors under
// "language_model.".
ModelConfig read_gemma3_text_config(const json& j) {
  if (!j.contains("text_config") || !j.at("text_config").is_object()) {
    throw FieldError{"text_config", "missing (Gemma3ForConditionalGeneration keeps its text model's config there)"};
  }
  json t = j.at("text_config");
  const json defaults = {{"vocab_size", 262208},       {"hidden_size", 2304},     {"intermediate_size", 9216},
                         {"num_hidden_layers", 26},     {"num_attention_heads", 8}, {"num_key_value_heads", 4},
                         {"torch_dtype", j.value("torch_dtype", json("bfloat16"))}};
  for (const auto& [key, value] : defaults.items())
    if (!t.contains(key) || t.at(key).is_null()) t[key] = value;
  t["architectures"] = json::array({"Gemma3ForCausalLM"});
  try {
    ModelConfig c = read_config(t);
    c.weight_prefix = "language_model.";
    return c;
  } catch (FieldError& e) {
    e.key = "text_config." + e.key;
    throw;
  }
}

ModelConfig read_config(const json& j) {
  const Fields f(j, "");
  ModelConfig c;
  if (!f.has("architectures")) throw FieldError{"architectures", "missing"};
  const json& archs = j.at("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string()) {
    throw FieldError{"architectures", "must be a non-empty list of names, got " + archs.dump().substr(0, 200)};
  }
  c.architecture = archs[0].get<std::string>();
  if (c.architecture == "Gemma3ForConditionalGeneration") return read_gemma3_text_config(j);
  c.hidden_size = f.int32("hidden_size", 1, ModelConfig::kMaxWidth);
  c.intermediate_size = f.int32("intermediate_size", 1, ModelConfig::kMaxWidth);
  c.num_layers = f.int32("num_hidden_layers", 1, ModelConfig::kMaxCount);
  c.num_heads = f.int32("num_attention_heads", 1, ModelConfig::kMaxCount);
  c.num_kv_heads = f.int32("num_key_value_heads", 1, c.num_heads, c.num_heads);
  c.vocab_size = f.int32("vocab_size", 1, ModelConfig::kMaxVocab);
  c.max_position_embeddings = f.int32("max_position_embeddings", 1, ModelConfig::kMaxPositions, 2048);
  c.rms_norm_eps = f.real("rms_norm_eps", 1e-5f, &between_0_and_1, "must be a number above 0 and below 1");
  c.rope_theta = f.real("rope_theta", 10000.0f, &positive, kPositive);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.hidden_act = f.text("hidden_act", "silu");
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
  // HF: head_dim when set, else hidden_size // num_attention_heads.
  const bool gemma3 = c.architecture == "Gemma3ForCausalLM", gemma2 = c.architecture == "Gemma2ForCausalLM";
  c.head_dim =
      f.int32("head_dim", 2, ModelConfig::kMaxCount, gemma3 || gemma2 ? 256 : c.hidden_size / c.num_heads);
  if (c.head_dim < 2 || c.head_dim % 2 != 0 || c.head_dim > ModelConfig::kMaxCount) {
    throw FieldError{f.has("head_dim") ? "head_dim" : "hidden_size",
                     "the head dimension (head_dim, else hidden_size / num_attention_heads) must be even (RoPE) and "
                     "between 2 and " + std::to_string(ModelConfig::kMaxCount) + ", got " + std::to_string(c.head_dim)};
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    throw FieldError{"num_key_value_heads", "must divide num_attention_heads (" + std::to_string(c.num_heads) +
                                                "), got " + std::to_string(c.num_kv_heads)};
  }
  if (int64_t(c.num_heads) * c.head_dim > ModelConfig::kMaxWidth) {
    throw FieldError{"num_attention_heads", "times head_dim (" + std::to_string(c.num_heads) + " x " +
                                                std::to_string(c.head_dim) + ") must be at most " +
                                                std::to_string(ModelConfig::kMaxWidth)};
  }
  const bool qwen2_moe = c.architecture == "Qwen2MoeForCausalLM";
  c.attention_bias = f.boolean("attention_bias", false) || c.architecture == "Qwen2ForCausalLM" || qwen2_moe;
  const bool qwen_moe = c.architecture == "Qwen3MoeForCausalLM" || qwen2_moe;
  c.qk_norm = c.architecture == "Qwen3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM";
  c.num_experts = qwen_moe ? f.int32("num_experts", 0, ModelConfig::kMaxCount, 0)
                           : f.int32("num_local_experts", 0, ModelConfig::kMaxCount, 0);
  c.moe_intermediate_size = c.intermediate_size;
  c.sparse_layers.assign(static_cast<size_t>(c.num_layers), c.num_experts > 0);
  if (c.num_experts > 0) {
    c.experts_per_token = f.int32("num_experts_per_tok", 1, c.num_experts);
    if (qwen_moe) {
      // Qwen3MoeConfig's and Qwen2MoeConfig's defaults: norm_topk_prob false, decoder_sparse_step 1, no
      // mlp_only_layers; Qwen2-MoE's shared expert.
      if (qwen2_moe) {
        c.shared_expert_intermediate_size =
            f.int32("shared_expert_intermediate_size", 1, ModelConfig::kMaxWidth, c.intermediate_size);
      }
      c.moe_intermediate_size = f.int32("moe_intermediate_size", 1, ModelConfig::kMaxWidth, c.intermediate_size);
      c.norm_topk_prob = f.boolean("norm_topk_prob", false);
      const int step = f.int32("decoder_sparse_step", 1, ModelConfig::kMaxCount, 1);
      for (int l = 0; l < c.num_layers; ++l) c.sparse_layers[static_cast<size_t>(l)] = (l + 1) % step == 0;
      if (f.has("mlp_only_layers")) {
        const json& dense = j.at("mlp_only_layers");
        if (!dense.is_array()) {
          throw FieldError{"mlp_only_layers", "must be a list of layer indices, got " + dense.dump().substr(0, 200)};
        }
        for (const json& l : dense) {
          if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.num_layers) {
            throw FieldError{"mlp_only_layers", "must hold layer indices below num_hidden_layers (" +
                                                    std::to_string(c.num_layers) + "), got " + l.dump()};
          }
          c.sparse_layers[static_cast<size_t>(l.get<int64_t>())] = false;
        }
      }
    }
  }
  c.sliding_window = sliding_windows(f, c.architecture, c.num_layers);
  if (gemma3 || gemma2) {
    c.qk_norm = gemma3;
    read_gemma(f, c, gemma3);
  }

  read_rotary(f, j, c);

  // Every weight element together (the families of plugins/transformer), in 128 bits: far below int64 when accepted.
  using big = __int128;
  const big h = c.hidden_size, q = big(c.num_heads) * c.head_dim, kv = big(c.num_kv_heads) * c.head_dim,
            ff = std::max(c.intermediate_size, c.moe_intermediate_size), experts = std::max(1, c.num_experts);
  const big per_layer = h * (q + 2 * kv) + q * h + experts * 3 * ff * h + big(c.num_experts) * h + 4 * h + q + 2 * kv +
                        2 * big(c.head_dim) + 3 * big(c.shared_expert_intermediate_size) * h +
                        (c.shared_expert_intermediate_size > 0 ? h : 0);
  const big total = 2 * big(c.vocab_size) * h + big(c.num_layers) * per_layer + h;
  if (total > ModelConfig::kMaxParameters) {
    throw FieldError{"hidden_size", "with intermediate_size, num_hidden_layers, the heads, vocab_size and the experts "
                                    "this makes over 2^50 weights: not a model this engine can hold"};
  }
  if (f.has("quantization_config")) {
    const json& qj = j.at("quantization_config");
    if (!qj.is_object()) throw FieldError{"quantization_config", "must be an object, got " + qj.dump().substr(0, 200)};
    const Fields q(qj, "quantization_config.");
    ModelConfig::CheckpointQuantization& cq = c.checkpoint_quantization;
    cq.method = q.text("quant_method", "");
    if (cq.method != "awq" && cq.method != "gptq") {
      throw FieldError{"quantization_config.quant_method",
                       "must be awq or gptq (weights quantized in the checkpoint), got '" + cq.method + "'", Errc::unsupported};
    }
    cq.bits = q.int32("bits", 4, 8, 4);
    if (cq.bits != 4 && !(cq.method == "gptq" && cq.bits == 8)) {
      throw FieldError{"quantization_config.bits", "must be 4 (AWQ, GPTQ) or 8 (GPTQ), got " + std::to_string(cq.bits),
                       Errc::unsupported};
    }
    cq.group_size = q.int32("group_size", -1, 1 << 20, 128);
    if (cq.group_size == 0 || cq.group_size < -1) throw FieldError{"quantization_config.group_size", "must be -1 or above 0"};
    cq.desc_act = q.boolean("desc_act", false);
    const std::string format = q.text("checkpoint_format", "gptq");
    if (format != "gptq" && format != "gptq_v2") {
      throw FieldError{"quantization_config.checkpoint_format", "must be gptq or gptq_v2, got '" + format + "'",
                       Errc::unsupported};
    }
    cq.zeros_plus_one = cq.method == "gptq" && format == "gptq";
    if (cq.method == "awq" && q.text("version", "gemm") != "gemm") {
      throw FieldError{"quantization_config.version", "only AWQ's gemm packing is supported, got '" +
                                                          q.text("version", "") + "'", Errc::unsupported};
    }
  }
  return c;
}

}  // namespace

Result<ModelConfig> ModelConfig::load(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (GgufFile::is_gguf(model_dir)) {
    auto file = GgufFile::open(model_dir);
    if (!file) return file.error();
    auto j = hf_config_from_gguf(*file);
    if (!j) return j.error();
    try {
      return read_config(*j);
    } catch (const FieldError& e) {
      return make_error(e.code, model_dir.string() + ": " + e.key + " (from its GGUF metadata): " + e.message);
    } catch (const std::exception& e) {
      return make_error(Errc::parse_error, model_dir.string() + ": " + e.what());
    }
  }
  if (!std::filesystem::is_directory(model_dir, ec)) {
    return make_error(Errc::not_found, "model folder " + model_dir.string() + " does not exist or is not a folder");
  }
  const auto path = model_dir / "config.json";
  std::ifstream in(path);
  if (!in) return make_error(Errc::not_found, path.string() + ": missing or unreadable");
  json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    return make_error(Errc::parse_error, path.string() + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) return make_error(Errc::parse_error, path.string() + ": must be a JSON object");
  try {
    return read_config(j);
  } catch (const FieldError& e) {
    return make_error(e.code, path.string() + ": " + e.key + ": " + e.message);
  } catch (const std::exception& e) {
    return make_error(Errc::parse_error, path.string() + ": " + e.what());
  }
}

}  // namespace actord
