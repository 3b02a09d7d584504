// What `actord calibrate` and `actord simulate` agree on: which cost profile entry (sim/cost_profile.hpp) prices a
// topology's group (the model as served and the replica's shape, threads per rank as the plan resolves them on this
// machine), and the simulated fleet of a topology.
#pragma once

#include <string>

#include "core/status.hpp"
#include "core/topology_config.hpp"
#include "core/topology_plan.hpp"
#include "plugins/model_checks.hpp"
#include "sim/cost_profile.hpp"
#include "sim/serving_simulator.hpp"

namespace actord::cli {

// "LlamaForCausalLM, 12 layers, hidden 768, 12/12 heads, ffn 2048, vocab 32000, bfloat16 weights, bfloat16 KV".
std::string model_key(const CheckedModel& model);

// Group gi's replica shape in `plan` (its first rank's threads); refused, naming the key, for what the simulator
// does not model: AFD pools, micro-batches beyond two, groups on nodes.
Result<sim::ReplicaShape> replica_shape(const TopologyConfig& topology, const TopologyPlan& plan, size_t gi,
                                        const CheckedModel& model);

// The fleet `topology` runs on a machine of `cores` cores (the plan resolves threads and KV pools there), each
// group priced by its profile entry (an autoscaled group's added replicas serving `replica_start_s` after the
// decision); errors name the group's key.
Result<sim::SimFleet> simulated_fleet(const TopologyConfig& topology, const CheckedModel& model,
                                      const sim::CostProfile& profile, unsigned cores, double replica_start_s = 1.0);

}  // namespace actord::cli
