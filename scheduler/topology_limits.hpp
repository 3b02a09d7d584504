// The batcher's limits a topology gives every scheduler (the engine's and the simulator's alike): engine.* limits,
// scheduler.plan_ahead, speculative decoding, the LoRA adapters; and the model's vocabulary and served context.
// A group's role (prefill: hand off) is the caller's to add.
#pragma once

#include "core/topology_config.hpp"
#include "scheduler/batch_scheduler.hpp"

namespace actord {

SchedulerLimits limits_of(const TopologyConfig& topology, int vocab_size, int max_model_len);

}  // namespace actord
