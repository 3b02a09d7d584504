#include "plugins/weight_store_fused.hpp"

#include <array>
#include <cctype>

#include "plugins/model_config.hpp"

namespace actord::store_detail {

FusedRows FusedRows::of(const ModelConfig& c) {
  return {int64_t(c.num_heads) * c.head_dim, int64_t(c.num_kv_heads) * c.head_dim, c.intermediate_size,
          c.num_experts, c.moe_intermediate_size > 0 ? c.moe_intermediate_size : c.intermediate_size, c.hidden_size};
}

namespace {

// "<prefix>experts.E.<rest>" -> {E, "<prefix>experts.<rest>"}; nullopt for other names.
std::optional<std::pair<int64_t, std::string>> expert_of(const std::string& name) {
  const std::string key = ".experts.";
  const size_t at = name.find(key);
  if (at == std::string::npos) return std::nullopt;
  size_t end = at + key.size();
  int64_t e = 0;
  const size_t digits = end;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])) && end - digits < 9)
    e = e * 10 + (name[end++] - '0');
  if (end == digits || end >= name.size() || name[end] != '.') return std::nullopt;
  return std::pair{e, name.substr(0, at + key.size()) + name.substr(end + 1)};
}

}  // namespace

std::optional<FusedPart> fused_part(const std::string& name, const FusedRows& r) {
  if (const auto expert = expert_of(name); expert && r.experts > 0 && expert->first < r.experts) {
    const std::string& stacked = expert->second;
    // down_proj / w2: [hidden, expert_ff] per expert; gate / up (w1 / w3): [expert_ff, hidden].
    const bool down = stacked.ends_with("experts.w2.weight") || stacked.ends_with("experts.down_proj.weight");
    const bool gate_up = stacked.ends_with("experts.w1.weight") || stacked.ends_with("experts.w3.weight") ||
                         stacked.ends_with("experts.gate_proj.weight") || stacked.ends_with("experts.up_proj.weight");
    if (!down && !gate_up) return std::nullopt;
    const int64_t rows = down ? r.hidden : r.expert_ff;
    return FusedPart{stacked, r.experts * rows, expert->first * rows};
  }
  struct Part {
    const char* part;
    const char* fused;
    int64_t first, total;
  };
  const std::array<Part, 5> parts{{{"self_attn.q_proj.", "self_attn.qkv_proj.", 0, r.q + 2 * r.kv},
                                   {"self_attn.k_proj.", "self_attn.qkv_proj.", r.q, r.q + 2 * r.kv},
                                   {"self_attn.v_proj.", "self_attn.qkv_proj.", r.q + r.kv, r.q + 2 * r.kv},
                                   {"mlp.gate_proj.", "mlp.gate_up_proj.", 0, 2 * r.ff},
                                   {"mlp.up_proj.", "mlp.gate_up_proj.", r.ff, 2 * r.ff}}};
  for (const Part& p : parts) {
    const size_t at = name.find(p.part);
    if (at == std::string::npos) continue;
    const std::string suffix = name.substr(at + std::char_traits<char>::length(p.part));
    if (suffix != "weight" && suffix != "bias") continue;
    return FusedPart{name.substr(0, at) + p.fused + suffix, p.total, p.first};
  }
  return std::nullopt;
}

}  // namespace actord::store_detail
