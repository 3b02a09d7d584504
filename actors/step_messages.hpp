// The scheduler's side of the step protocol, apart from the actor: a StepPlan as an ExecuteStep message, a
// StepResult back into (sequence id, token) pairs, and sequence updates as a StreamDeltaBatch. Kept out of the actor
// so that bench/scheduler_bench.cpp times exactly what the scheduler does per step.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "comms/wire_msg.hpp"
#include "scheduler/batch_scheduler.hpp"

namespace actord {

wire_msg encode_execute_step(const StepPlan& plan, uint64_t step_id);
wire_msg encode_stream_deltas(const std::vector<const SequenceUpdate*>& updates);

}  // namespace actord
