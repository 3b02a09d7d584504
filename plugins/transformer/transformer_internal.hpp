// What transformer_model.cpp and transformer_experts.cpp share, inside the transformer plugin only.
#pragma once

#include <chrono>
#include <string>

#include "core/status.hpp"
#include "plugins/model.hpp"
#include "plugins/transformer/transformer_model.hpp"

namespace actord::transformer_detail {

// The names of layer prefix p's router and expert e's gate, up and down projections.
struct ExpertNames {
  std::string router, gate, up, down;
};
inline ExpertNames expert_names(const TransformerSpec& spec, const std::string& p, int e) {
  if (spec.expert_naming == ExpertNaming::qwen) {
    const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
    return {p + "mlp.gate.weight", ep + "gate_proj.weight", ep + "up_proj.weight", ep + "down_proj.weight"};
  }
  const std::string ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
  return {p + "block_sparse_moe.gate.weight", ep + "w1.weight", ep + "w3.weight", ep + "w2.weight"};
}

// A collective call, its time added to context.comm_ns when that is set.
template <class Call>
inline Status timed(const ForwardContext& context, Call&& call) {
  if (!context.comm_ns) return call();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = call();
  *context.comm_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return st;
}

}  // namespace actord::transformer_detail
