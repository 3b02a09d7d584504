#include "plugins/weight_store_fused.hpp"

#include <array>

#include "plugins/model_config.hpp"

namespace actord::store_detail {

FusedRows FusedRows::of(const ModelConfig& c) {
  return {int64_t(c.num_heads) * c.head_dim, int64_t(c.num_kv_heads) * c.head_dim, c.intermediate_size};
}

std::optional<FusedPart> fused_part(const std::string& name, const FusedRows& r) {
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
