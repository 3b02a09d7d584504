#include "plugins/lora_adapter.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "memory/safetensors.hpp"

namespace actord {

namespace {

constexpr std::array<const char*, kLoraTargets> kNames = {"q_proj",    "k_proj", "v_proj",   "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"};

bool layer_is_sparse(const ModelConfig& c, int layer) {
  return c.num_experts > 0 && (c.sparse_layers.empty() || c.sparse_layers[static_cast<size_t>(layer)]);
}

// [out, in] of a target's projection in the whole model.
std::pair<int64_t, int64_t> projection_shape(const ModelConfig& c, LoraTarget t) {
  const int64_t h = c.hidden_size, q = int64_t(c.num_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim,
                ff = c.intermediate_size;
  switch (t) {
    case LoraTarget::q: return {q, h};
    case LoraTarget::k:
    case LoraTarget::v: return {kv, h};
    case LoraTarget::o: return {h, q};
    case LoraTarget::gate:
    case LoraTarget::up: return {ff, h};
    case LoraTarget::down: return {h, ff};
  }
  return {0, 0};
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A module an adapter's tensors name: one projection, or Phi-3's fused qkv_proj / gate_up_proj, whose rows are
// those of several projections in order (q | k | v, gate | up): their deltas share A and split B's rows.
struct Module {
  const char* name;  // as PEFT names it under self_attn. or mlp.
  bool attention;
  std::vector<LoraTarget> parts;
};
const std::vector<Module>& modules() {
  static const std::vector<Module> all = {
      {"q_proj", true, {LoraTarget::q}},          {"k_proj", true, {LoraTarget::k}},
      {"v_proj", true, {LoraTarget::v}},          {"o_proj", true, {LoraTarget::o}},
      {"gate_proj", false, {LoraTarget::gate}},   {"up_proj", false, {LoraTarget::up}},
      {"down_proj", false, {LoraTarget::down}},   {"qkv_proj", true, {LoraTarget::q, LoraTarget::k, LoraTarget::v}},
      {"gate_up_proj", false, {LoraTarget::gate, LoraTarget::up}}};
  return all;
}

// A tensor name split into its layer, module (index in modules()) and matrix (A or B); nullopt when it is not an
// adapter tensor this loader knows.
struct TensorPlace {
  int layer = 0;
  size_t module = 0;
  bool is_a = true;
};
std::optional<TensorPlace> place_of(const std::string& name) {
  static const std::string prefix = "base_model.model.model.layers.";
  if (!name.starts_with(prefix)) return std::nullopt;
  size_t pos = prefix.size();
  size_t digits = 0;
  while (pos + digits < name.size() && std::isdigit(static_cast<unsigned char>(name[pos + digits]))) ++digits;
  if (digits == 0 || digits > 6) return std::nullopt;
  TensorPlace place;
  place.layer = std::stoi(name.substr(pos, digits));
  std::string rest = name.substr(pos + digits);
  for (const char* matrix : {".lora_A.weight", ".lora_B.weight"}) {
    if (!rest.ends_with(matrix)) continue;
    place.is_a = matrix[6] == 'A';
    rest.resize(rest.size() - std::strlen(matrix));
    for (size_t m = 0; m < modules().size(); ++m) {
      const Module& module = modules()[m];
      if (rest == (module.attention ? ".self_attn." : ".mlp.") + std::string(module.name)) {
        place.module = m;
        return place;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

const char* lora_target_name(LoraTarget target) { return kNames[static_cast<size_t>(target)]; }

std::string LoraAdapter::describe() const {
  char scaling[32];
  std::snprintf(scaling, sizeof scaling, "%g", static_cast<double>(scaling_));
  std::string s = "r " + std::to_string(rank_) + ", scaling " + scaling + ",";
  for (int t = 0; t < kLoraTargets; ++t)
    if (changes_[size_t(t)]) s += std::string(" ") + kNames[size_t(t)];
  return s;
}

const LoraPair* LoraAdapter::pair(int layer, LoraTarget target) const {
  if (layer < 0 || static_cast<size_t>(layer) >= layers_.size()) return nullptr;
  return layers_[static_cast<size_t>(layer)][static_cast<size_t>(target)].get();
}

Result<std::shared_ptr<const LoraAdapter>> LoraAdapter::open(const LoraModule& module, const ModelConfig& config,
                                                             int max_rank) {
  const std::filesystem::path config_path = module.path / "adapter_config.json";
  const std::string where = "lora.modules." + module.name;
  std::ifstream in(config_path);
  if (!in) return make_error(Errc::not_found, where + ": " + config_path.string() + " not found (a PEFT LoRA folder "
                                                  "holds adapter_config.json and adapter_model.safetensors)");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return make_error(Errc::parse_error, config_path.string() + ": not a JSON object");
  auto refuse = [&](const std::string& key, const std::string& why) {
    return make_error(Errc::unsupported, config_path.string() + ": " + key + ": " + why);
  };
  auto bad = [&](const std::string& key, const std::string& why) {
    return make_error(Errc::invalid_config, config_path.string() + ": " + key + ": " + why);
  };
  if (j.contains("peft_type") && j["peft_type"] != "LORA")
    return refuse("peft_type", "only LORA adapters are served, found " + j["peft_type"].dump());
  if (!j.contains("r") || !j["r"].is_number_integer()) return bad("r", "is required (a positive integer)");
  const int64_t r = j["r"].get<int64_t>();
  if (r < 1 || r > max_rank)
    return bad("r", std::to_string(r) + " is outside 1 .. lora.max_lora_rank (" + std::to_string(max_rank) + ")");
  double alpha = static_cast<double>(r);  // PEFT's default lora_alpha is 8 with r 8: scaling 1
  if (j.contains("lora_alpha")) {
    if (!j["lora_alpha"].is_number() || !(j["lora_alpha"].get<double>() > 0.0))
      return bad("lora_alpha", "must be a positive number");
    alpha = j["lora_alpha"].get<double>();
  }
  // A boolean key (absent or null: false); nullopt when it holds something else.
  auto flag = [&](const char* key) -> std::optional<bool> {
    if (!j.contains(key) || j[key].is_null()) return false;
    if (!j[key].is_boolean()) return std::nullopt;
    return j[key].get<bool>();
  };
  for (const char* key : {"use_rslora", "use_dora", "fan_in_fan_out"})
    if (!flag(key)) return bad(key, "must be true or false");
  const bool rslora = *flag("use_rslora");
  if (*flag("use_dora")) return refuse("use_dora", "DoRA adapters are not served");
  if (*flag("fan_in_fan_out")) return refuse("fan_in_fan_out", "only Linear layers' A [r, in] are served");
  if (j.contains("bias") && j["bias"] != "none") return refuse("bias", "adapters with biases are not served");
  if (j.contains("modules_to_save") && !j["modules_to_save"].is_null() && !j["modules_to_save"].empty())
    return refuse("modules_to_save", "adapters that replace whole modules are not served");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && !j[key].is_null() && !j[key].empty())
      return refuse(key, "per-module ranks and alphas are not served");

  const std::filesystem::path weights_path = module.path / "adapter_model.safetensors";
  auto file = SafetensorsFile::open(weights_path);
  if (!file) return Error{file.error().code, where + ": " + file.error().message};

  std::shared_ptr<LoraAdapter> adapter(new LoraAdapter());
  adapter->name_ = module.name;
  adapter->rank_ = static_cast<int>(r);
  adapter->scaling_ = static_cast<float>(rslora ? alpha / std::sqrt(double(r)) : alpha / double(r));
  adapter->layers_.resize(static_cast<size_t>(config.num_layers));
  // Each (layer, module)'s A and B as f32, split into the projections' pairs once both are read.
  struct Matrices {
    std::vector<float> a, b;
  };
  std::map<std::pair<int, size_t>, Matrices> read;
  const std::string file_name = weights_path.string();
  for (const auto& [name, view] : file->tensors()) {
    const auto place = place_of(name);
    if (!place)
      return make_error(Errc::unsupported, file_name + ": tensor " + name +
                                               ": not a LoRA matrix of a projection this engine adapts "
                                               "(self_attn.q/k/v/o_proj or qkv_proj, mlp.gate/up/down_proj or "
                                               "gate_up_proj of a layer)");
    if (place->layer >= config.num_layers)
      return make_error(Errc::invalid_config, file_name + ": tensor " + name + ": the model has " +
                                                  std::to_string(config.num_layers) + " layers");
    const Module& module = modules()[place->module];
    if (!module.attention && layer_is_sparse(config, place->layer))
      return make_error(Errc::unsupported, file_name + ": tensor " + name +
                                               ": the layer's MLP is a mixture of experts, which adapters do not "
                                               "change here");
    if (view.int32) return make_error(Errc::unsupported, file_name + ": tensor " + name + ": I32, not a float");
    int64_t out = 0;
    const int64_t in_features = projection_shape(config, module.parts[0]).second;
    for (LoraTarget part : module.parts) out += projection_shape(config, part).first;
    const std::vector<int64_t> want = place->is_a ? std::vector<int64_t>{r, in_features} : std::vector<int64_t>{out, r};
    if (view.shape != want)
      return make_error(Errc::invalid_config, file_name + ": tensor " + name + ": expected " + shape_text(want) +
                                                  ", found " + shape_text(view.shape) + " (r " + std::to_string(r) +
                                                  " from adapter_config.json)");
    std::vector<float>& values = place->is_a ? read[{place->layer, place->module}].a : read[{place->layer, place->module}].b;
    values.resize(view.num_elements());
    convert_to_f32(view, values.data());
    for (float v : values)
      if (!std::isfinite(v))
        return make_error(Errc::invalid_config, file_name + ": tensor " + name + ": holds a value that is not finite");
    adapter->bytes_ += values.size() * sizeof(float);
  }
  bool any = false;
  for (auto& [key, m] : read) {
    const auto [layer, index] = key;
    const Module& module = modules()[index];
    const std::string where_in_file = file_name + ": layer " + std::to_string(layer) + " " + module.name;
    if (m.a.empty() || m.b.empty())
      return make_error(Errc::invalid_config,
                        where_in_file + " has lora_" + (m.b.empty() ? "A but no lora_B" : "B but no lora_A"));
    int64_t first_row = 0;
    for (LoraTarget part : module.parts) {
      auto& slot = adapter->layers_[size_t(layer)][size_t(part)];
      if (slot)
        return make_error(Errc::invalid_config, where_in_file + ": " + lora_target_name(part) +
                                                    " is adapted twice (by itself and by a fused module)");
      const auto [out, in_features] = projection_shape(config, part);
      slot = std::make_unique<LoraPair>();
      slot->rank = r;
      slot->in = in_features;
      slot->out = out;
      slot->a = m.a;
      slot->b.assign(m.b.begin() + first_row * r, m.b.begin() + (first_row + out) * r);
      first_row += out;
      adapter->changes_[size_t(part)] = true;
      any = true;
    }
  }
  if (!any) return make_error(Errc::invalid_config, file_name + ": holds no LoRA matrices");
  return std::shared_ptr<const LoraAdapter>(std::move(adapter));
}

}  // namespace actord
