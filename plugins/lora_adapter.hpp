// LoRA adapters in PEFT's format (adapter_config.json + adapter_model.safetensors), for the transformer's linear
// layers: a projection y = x W^T becomes y = x W^T + scaling * (x A^T) B^T for the requests that name the adapter,
// W itself unchanged, so one loaded model serves its base and any number of adapters in the same batch (vLLM's and
// S-LoRA's multi-LoRA serving).
//
// Contract:
// - open() reads and checks an adapter against the model it will run on: PEFT's LORA type, `r` within max_rank,
//   `lora_alpha`, `use_rslora` (scaling alpha / sqrt(r), else alpha / r); refused by name: DoRA, biases,
//   fan_in_fan_out, modules_to_save, per-module rank or alpha patterns. Every tensor must be one of
//   base_model.model.model.layers.L.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj}.lora_{A,B}.weight of a
//   layer the model has (a dense MLP: experts take none), in pairs, with the shapes the model's projections imply
//   (A [r, in], B [out, r]); or Phi-3's fused self_attn.qkv_proj / mlp.gate_up_proj, whose B rows are q | k | v
//   and gate | up (each projection's pair shares A and takes its rows of B). Errors name the file and the key or
//   tensor.
// - The pairs come back as f32 on the host, as stored (the scaling is scaling(), applied by the model); a model
//   slices them as it slices the projection they change (tensor parallelism) and uploads them to its backend in
//   the dtype it serves its own weights in (vLLM's lora_dtype auto).
// - Immutable once opened; shared by the ranks of a process.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/lora_module.hpp"
#include "core/status.hpp"
#include "plugins/model_config.hpp"

namespace actord {

// The projections an adapter may change, in the order their deltas are stored.
enum class LoraTarget : uint8_t { q, k, v, o, gate, up, down };
constexpr int kLoraTargets = 7;
// PEFT's module name of a target: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.
const char* lora_target_name(LoraTarget target);

// One projection's low-rank matrices: A [rank, in] and B [out, rank], row-major f32; the delta is
// scaling * (x A^T) B^T.
struct LoraPair {
  int64_t rank = 0, in = 0, out = 0;
  std::vector<float> a, b;
};

class LoraAdapter {
 public:
  static Result<std::shared_ptr<const LoraAdapter>> open(const LoraModule& module, const ModelConfig& config,
                                                         int max_rank);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  float scaling() const { return scaling_; }
  // Whether any layer's `target` has a delta.
  bool changes(LoraTarget target) const { return changes_[static_cast<size_t>(target)]; }
  // Layer `layer`'s delta of `target`; nullptr when the adapter leaves that projection alone.
  const LoraPair* pair(int layer, LoraTarget target) const;
  // Bytes of its f32 matrices (what a worker holding the whole model adds for it).
  uint64_t bytes() const { return bytes_; }
  // "r 16, scaling 2, q_proj k_proj v_proj o_proj gate_proj up_proj down_proj"
  std::string describe() const;

 private:
  LoraAdapter() = default;
  std::string name_;
  int rank_ = 0;
  float scaling_ = 1.0f;
  uint64_t bytes_ = 0;
  std::array<bool, kLoraTargets> changes_{};
  std::vector<std::array<std::unique_ptr<LoraPair>, kLoraTargets>> layers_;  // [num_layers]
};

}  // namespace actord
