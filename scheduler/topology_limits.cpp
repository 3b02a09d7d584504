#include "scheduler/topology_limits.hpp"

namespace actord {

SchedulerLimits limits_of(const TopologyConfig& topology, int vocab_size, int max_model_len) {
  SchedulerLimits limits;
  limits.max_num_seqs = topology.engine.max_num_seqs;
  limits.max_num_batched_tokens = topology.engine.max_num_batched_tokens;
  limits.block_size = topology.engine.block_size;
  limits.max_model_len = max_model_len;
  limits.vocab_size = vocab_size;
  limits.plan_ahead = topology.scheduler.plan_ahead;
  limits.enable_prefix_caching = topology.engine.enable_prefix_caching;
  if (topology.engine.preemption_mode == "swap") limits.preemption_mode = PreemptionMode::swap;
  limits.move_kv = topology.engine.reshape_kv == "move";
  if (topology.speculative.enabled()) {
    const SpeculativeSection& spec = topology.speculative;
    limits.speculative = SpeculativeLimits{spec.num_speculative_tokens, spec.prompt_lookup_min, spec.prompt_lookup_max,
                                           spec.disable_by_batch_size};
  }
  limits.num_lora_adapters = static_cast<int>(topology.lora.modules.size());
  return limits;
}

}  // namespace actord
