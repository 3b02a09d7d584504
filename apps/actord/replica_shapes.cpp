#include "apps/actord/replica_shapes.hpp"

#include "core/dtype.hpp"
#include "core/host_cpus.hpp"
#include "core/route_policy.hpp"
#include "scheduler/autoscaler.hpp"
#include "scheduler/topology_limits.hpp"

namespace actord::cli {

std::string model_key(const CheckedModel& m) {
  const ModelConfig& c = m.config;
  std::string key = c.architecture + ", " + std::to_string(c.num_layers) + " layers, hidden " +
                    std::to_string(c.hidden_size) + ", " + std::to_string(c.num_heads) + "/" +
                    std::to_string(c.num_kv_heads) + " heads, ffn " + std::to_string(c.intermediate_size);
  if (c.num_experts > 0) key += ", " + std::to_string(c.num_experts) + " experts";
  return key + ", vocab " + std::to_string(c.vocab_size) + ", " + m.weight_format + " weights, " +
         dtype_config_name(m.kv_dtype) + " KV";
}

Result<sim::ReplicaShape> replica_shape(const TopologyConfig& topology, const TopologyPlan& plan, size_t gi,
                                        const CheckedModel& model) {
  const GroupSection& g = topology.groups[gi];
  const std::string key = topology.source.string() + ": groups[" + std::to_string(gi) + "]";
  if (g.afd.active()) return Error{Errc::invalid_argument, key + ".afd: the simulator does not model AFD pools"};
  if (g.lanes() > 1)
    return Error{Errc::invalid_argument, key + ".ep: the simulator does not model attention data parallel lanes"};
  if (g.placement == Placement::node)
    return Error{Errc::invalid_argument, key + ".placement: the simulator models this machine's groups only"};
  if (g.tbo && (g.micro_batches != 2 || g.tbo_auto))
    return Error{Errc::invalid_argument, key + ".tbo: the simulator models two micro-batches (tbo: true) only"};
  sim::ReplicaShape s;
  s.model = model_key(model);
  s.device = g.device;
  s.tp = g.tp;
  s.pp = g.pp;
  s.ep = g.ep;
  s.threads = std::max(1, plan.groups[gi].ranks.empty() ? g.threads : plan.groups[gi].ranks.front().threads);
  s.placement = placement_name(g.placement);
  s.tbo = g.tbo;
  return s;
}

Result<sim::SimFleet> simulated_fleet(const TopologyConfig& topology, const CheckedModel& model,
                                      const sim::CostProfile& profile, unsigned cores, double replica_start_s) {
  auto plan = plan_topology(topology, model_shape(model), cores);
  if (!plan) return plan.error();
  sim::SimFleet fleet;
  fleet.router = phase_policies(topology);
  fleet.block_size = topology.engine.block_size;
  for (size_t gi = 0; gi < topology.groups.size(); ++gi) {
    const GroupSection& g = topology.groups[gi];
    auto shape = replica_shape(topology, *plan, gi, model);
    if (!shape) return shape.error();
    auto entry = profile.find(*shape, topology.source.string() + ": groups[" + std::to_string(gi) + "]");
    if (!entry) return entry.error();
    sim::SimReplicaGroup group;
    group.name = g.name;
    group.replicas = g.replicas;
    group.role = g.role;
    group.limits = limits_of(topology, model.config.vocab_size, model.max_model_len);
    group.kv_blocks = plan->groups[gi].num_kv_blocks;
    group.cost = (*entry)->cost;
    if (g.autoscale.active()) group.autoscale = resolved_autoscale(g.autoscale, topology.engine.max_num_seqs);
    group.start_s = replica_start_s;
    fleet.groups.push_back(std::move(group));
    if (g.role == ReplicaRole::prefill && !profile.handoff)
      return Error{Errc::invalid_argument, topology.source.string() + ": groups[" + std::to_string(gi) +
                                               "].role: prefill needs the hand-off's cost, which the profile lacks "
                                               "(calibrate a topology with a prefill and a decode group)"};
  }
  if (profile.handoff) fleet.handoff = *profile.handoff;
  return fleet;
}

}  // namespace actord::cli
