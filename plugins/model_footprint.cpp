#include "plugins/model_footprint.hpp"

#include <algorithm>
#include <initializer_list>

namespace actord {
namespace {

// Saturating arithmetic on non-negative sizes: a config.json with absurd numbers must not wrap to a small ask.
uint64_t mul(std::initializer_list<uint64_t> factors) {
  uint64_t r = 1;
  for (uint64_t f : factors) {
    if (__builtin_mul_overflow(r, f, &r)) return UINT64_MAX;
  }
  return r;
}

uint64_t add(std::initializer_list<uint64_t> terms) {
  uint64_t r = 0;
  for (uint64_t t : terms) {
    if (__builtin_add_overflow(r, t, &r)) return UINT64_MAX;
  }
  return r;
}

uint64_t u(int v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }

}  // namespace

uint64_t estimated_num_parameters(const ModelConfig& m) {
  const uint64_t hidden = u(m.hidden_size), q = mul({u(m.num_heads), u(m.head_dim)}),
                 kv = mul({u(m.num_kv_heads), u(m.head_dim)});
  const uint64_t embedding = mul({u(m.vocab_size), hidden});
  const uint64_t lm_head = m.tie_word_embeddings ? 0 : embedding;
  const uint64_t attention = add({mul({hidden, q}), mul({2, hidden, kv}), mul({q, hidden}),
                                  m.attention_bias ? add({q, mul({2, kv})}) : 0});
  const uint64_t experts = std::max<uint64_t>(1, u(m.num_experts));
  // A layer holds its experts (of moe_intermediate_size) or a dense MLP: the larger, per layer.
  const uint64_t expert_ff = u(m.moe_intermediate_size > 0 ? m.moe_intermediate_size : m.intermediate_size);
  const uint64_t shared =
      m.shared_expert_intermediate_size > 0 ? add({mul({3, hidden, u(m.shared_expert_intermediate_size)}), hidden}) : 0;
  const uint64_t sparse = m.num_experts > 0 ? add({mul({experts, 3, hidden, expert_ff}),
                                                   mul({u(m.num_experts), hidden}), shared})
                                            : 0;
  const uint64_t mlp = std::max(sparse, mul({3, hidden, u(m.intermediate_size)}));
  const uint64_t layer = add({attention, mlp, mul({2, hidden})});
  return add({embedding, lm_head, mul({u(m.num_layers), layer}), hidden});
}

uint64_t estimated_weight_bytes(const ModelConfig& model, DType weight_dtype) {
  return mul({estimated_num_parameters(model), dtype_size(weight_dtype)});
}

}  // namespace actord
