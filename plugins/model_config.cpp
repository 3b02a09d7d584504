#include "plugins/model_config.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "executors/cpu/kernels.hpp"

namespace actord {

size_t ModelConfig::kv_bytes_per_token(DType kv_dtype) const {
  return 2ull * num_layers * num_kv_heads * head_dim * dtype_size(kv_dtype);
}

DType ModelConfig::kv_cache_dtype(const std::string& kv_setting, const std::string& model_dtype_setting,
                                  const std::string& torch_dtype) {
  for (const std::string* name : {&kv_setting, &model_dtype_setting, &torch_dtype}) {
    if (*name == "auto") continue;
    return parse_dtype(*name).value_or(DType::f32);
  }
  return DType::f32;
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  cpu::rope_inv_freq(head_dim, rope_theta, inv.data());
  if (rope_scaling.type == "linear") {
    for (float& f : inv) f /= rope_scaling.factor;
  } else if (rope_scaling.type == "llama3") {
    // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth blend in between.
    const float old_len = static_cast<float>(rope_scaling.original_max_position_embeddings);
    const float low_wavelen = old_len / rope_scaling.low_freq_factor;
    const float high_wavelen = old_len / rope_scaling.high_freq_factor;
    for (float& f : inv) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      if (wavelen > low_wavelen) {
        f = f / rope_scaling.factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (old_len / wavelen - rope_scaling.low_freq_factor) /
                             (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor);
        f = (1.0f - smooth) * f / rope_scaling.factor + smooth * f;
      }
    }
  }
  return inv;
}

Result<ModelConfig> ModelConfig::load(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    return make_error(Errc::not_found, "model folder " + model_dir.string() + " does not exist or is not a folder");
  }
  const auto path = model_dir / "config.json";
  std::ifstream in(path);
  if (!in) return make_error(Errc::not_found, path.string() + ": missing or unreadable");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    return make_error(Errc::parse_error, path.string() + ": malformed JSON: " + e.what());
  }
  const std::string where = path.string() + ": ";
  ModelConfig c;
  try {
    const auto& archs = j.at("architectures");
    if (!archs.is_array() || archs.empty()) return make_error(Errc::parse_error, where + "'architectures' is empty");
    c.architecture = archs[0].get<std::string>();
    c.hidden_size = j.at("hidden_size").get<int>();
    c.intermediate_size = j.at("intermediate_size").get<int>();
    c.num_layers = j.at("num_hidden_layers").get<int>();
    c.num_heads = j.at("num_attention_heads").get<int>();
    c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
    c.vocab_size = j.at("vocab_size").get<int>();
    c.max_position_embeddings = j.value("max_position_embeddings", 2048);
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-5f);
    c.rope_theta = j.value("rope_theta", 10000.0f);
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    c.hidden_act = j.value("hidden_act", std::string("silu"));
    if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
    if (j.contains("head_dim") && !j["head_dim"].is_null()) {
      c.head_dim = j["head_dim"].get<int>();
    } else if (c.num_heads > 0) {
      c.head_dim = c.hidden_size / c.num_heads;
    }
    c.attention_bias = j.value("attention_bias", false) || c.architecture == "Qwen2ForCausalLM";
    c.num_experts = j.value("num_local_experts", 0);
    c.experts_per_token = j.value("num_experts_per_tok", 0);
    if (j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
        j.value("use_sliding_window", true)) {
      c.sliding_window = j["sliding_window"].get<int>();
    }
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      const auto& rs = j["rope_scaling"];
      c.rope_scaling.type = rs.contains("rope_type") ? rs["rope_type"].get<std::string>()
                                                     : rs.value("type", std::string());
      c.rope_scaling.factor = rs.value("factor", 1.0f);
      c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0f);
      c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0f);
      c.rope_scaling.original_max_position_embeddings = rs.value("original_max_position_embeddings", 8192);
      if (c.rope_scaling.type == "default") c.rope_scaling.type.clear();
      if (!c.rope_scaling.type.empty() && c.rope_scaling.type != "linear" && c.rope_scaling.type != "llama3") {
        return make_error(Errc::unsupported,
                          where + "rope_scaling type '" + c.rope_scaling.type + "' is not supported (linear, llama3)");
      }
    }
  } catch (const std::exception& e) {
    return make_error(Errc::parse_error, where + e.what());
  }
  auto positive = [&](int v, const char* name) -> Status {
    if (v <= 0) return make_error(Errc::parse_error, where + name + " must be positive, got " + std::to_string(v));
    return {};
  };
  ACTORD_TRY_STATUS(positive(c.hidden_size, "hidden_size"));
  ACTORD_TRY_STATUS(positive(c.intermediate_size, "intermediate_size"));
  ACTORD_TRY_STATUS(positive(c.num_layers, "num_hidden_layers"));
  ACTORD_TRY_STATUS(positive(c.num_heads, "num_attention_heads"));
  ACTORD_TRY_STATUS(positive(c.num_kv_heads, "num_key_value_heads"));
  ACTORD_TRY_STATUS(positive(c.head_dim, "head_dim"));
  ACTORD_TRY_STATUS(positive(c.vocab_size, "vocab_size"));
  ACTORD_TRY_STATUS(positive(c.max_position_embeddings, "max_position_embeddings"));
  if (c.num_heads % c.num_kv_heads != 0) {
    return make_error(Errc::parse_error, where + "num_attention_heads (" + std::to_string(c.num_heads) +
                                             ") must be a multiple of num_key_value_heads (" +
                                             std::to_string(c.num_kv_heads) + ")");
  }
  if (c.head_dim % 2 != 0) return make_error(Errc::parse_error, where + "head_dim must be even for RoPE");
  if (c.num_experts > 0 && (c.experts_per_token < 1 || c.experts_per_token > c.num_experts)) {
    return make_error(Errc::parse_error, where + "num_experts_per_tok must be between 1 and num_local_experts");
  }
  return c;
}

}  // namespace actord
