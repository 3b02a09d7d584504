// EPLB for one replica, as pure logic: when to move experts and where (vLLM's EPLB and SGLang's expert
// redistribution decide the same from a window of load).
//
// Contract: every `step_interval` results (on_step) it takes the tokens each expert of each MoE layer got since the
// last check (from the replica's cumulative [layer][expert] counters) and recomputes that layer's placement
// (core/expert_placement.hpp's rebalance: copies in proportion to load, heaviest first on the least loaded rank);
// a layer's new placement is kept only when it lowers the busiest rank's load by more than 5% of the mean
// (moving experts costs a step's worth of loading: noise must not trigger it). When any layer changed, on_step
// returns the whole new placement, [layer][slot], which the caller sends with the next step (every rank switches
// before that step's forward pass); otherwise an empty one. No clocks, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/expert_placement.hpp"

namespace actord {

// groups[].num_redundant_experts and .eplb_step_interval, with the replica's shape.
struct EplbSettings {
  int step_interval = 0;  // 0: off
  int ep = 1;
  int num_experts = 0;
  int redundant = 0;
  int num_layers = 0;
};

class EplbPlanner {
 public:
  explicit EplbPlanner(EplbSettings settings);
  // Every layer's placement as the ranks have it (or will from the next step), [layer][slot]; empty without EP.
  const std::vector<int32_t>& placement() const { return flat_; }
  uint64_t rebalances() const { return rebalances_; }
  // After each step's result, with the replica's expert token counters so far: a new placement, or empty.
  std::vector<int32_t> on_step(const std::vector<uint64_t>& expert_tokens);

 private:
  EplbSettings settings_;
  std::vector<ExpertPlacement> layers_;
  std::vector<int32_t> flat_;
  std::vector<uint64_t> since_;  // the counters at the last check
  int steps_ = 0;                // results since then
  uint64_t rebalances_ = 0;
};

}  // namespace actord
