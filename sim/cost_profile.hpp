// A cost profile: what `actord calibrate` measured on one machine, for `actord simulate` to price steps with. It
// holds a step cost model (sim/step_cost_model.hpp) per replica shape it calibrated: the model served (its
// architecture, sizes and how its weights and KV are held) and the replica's shape (device, tp, pp, ep, threads
// per rank, placement, two-batch overlap). A topology's group is priced by the entry of the same model and shape,
// whatever its replica count, role or router: those are what the simulator plays out.
//
// Contract: pure (JSON in and out). load() errors name the file and the key that is wrong; find() errors name the
// group's key path and list the shapes the profile has.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "sim/step_cost_model.hpp"

namespace actord::sim {

struct ReplicaShape {
  // The model as served, e.g. "LlamaForCausalLM, 12 layers, hidden 768, 12/12 heads, ffn 2048, vocab 32000,
  // bfloat16 weights, bfloat16 KV".
  std::string model;
  std::string device = "cpu";
  int tp = 1, pp = 1, ep = 1;
  int threads = 1;  // per rank, as resolved on the machine
  std::string placement = "thread";
  bool tbo = false;
  bool operator==(const ReplicaShape&) const = default;
  std::string describe() const;  // "tp 1 x pp 1, ep 1, 2 threads per rank, thread, cpu" (the model apart)
};

// The KV hand-off of prefill/decode disaggregation: the time from a prefill replica's first token to the sequence
// decoding on its decode replica, fixed_us + per_token_us per KV position moved.
struct HandOffCost {
  double fixed_us = 0;
  double per_token_us = 0;
  size_t samples = 0;  // hand-offs it was fitted on
};

struct ReplicaCost {
  ReplicaShape shape;
  uint32_t kv_blocks = 0;  // of each replica (lane), as the engine sized its KV pool
  StepCostModel cost;
};

struct CostProfile {
  std::string cpu;     // the machine's CPU model, in words
  std::string source;  // the topology it was calibrated from
  std::vector<ReplicaCost> replicas;
  std::optional<HandOffCost> handoff;

  // The entry for `shape`; an error naming `key` (e.g. "configs/dp2.yaml: groups[0]") otherwise.
  Result<const ReplicaCost*> find(const ReplicaShape& shape, const std::string& key) const;
  // Adds or replaces the entry of entry.shape.
  void put(ReplicaCost entry);

  nlohmann::json to_json() const;
  static Result<CostProfile> from_json(const nlohmann::json& j, const std::string& where);
  static Result<CostProfile> load(const std::filesystem::path& file);
  Status save(const std::filesystem::path& file) const;
};

}  // namespace actord::sim
