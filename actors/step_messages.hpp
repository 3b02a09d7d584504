// The scheduler's side of the step protocol, apart from the actor: a StepPlan as an ExecuteStep message, a
// StepResult back into StepSamples, and sequence updates as a StreamDeltaBatch. Kept out of the actor
// so that bench/scheduler_bench.cpp times exactly what the scheduler does per step.
#pragma once

#include <unordered_map>

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "comms/wire_msg.hpp"
#include "core/scheduler_stats.hpp"
#include "core/status.hpp"
#include "scheduler/batch_scheduler.hpp"

namespace actord {

// `expert_placement`: an EPLB placement the ranks take before this step's forward pass (empty: none).
// `lane_tokens`: with attention data parallel lanes, the most tokens any lane runs in this step (ExecuteStep);
// `lane_micro_tokens`: the most tokens any lane's micro-batch k of two-batch overlap runs, for each k.
// `trace`: the ranks record the step's spans (--trace). `whole`: ranks with two-batch overlap run this step as one
// batch (groups[].tbo: auto found steps of its size faster uncut).
wire_msg encode_execute_step(const StepPlan& plan, uint64_t step_id, std::span<const int32_t> expert_placement = {},
                             uint32_t lane_tokens = 0, bool trace = false,
                             std::span<const uint32_t> lane_micro_tokens = {}, bool whole = false);

// What a StepResult says: its samples (into `samples`, reused), its error, and the worker's timings.
struct StepResultInfo {
  std::optional<Error> error;
  uint64_t compute_us = 0;
  uint64_t idle_us = 0;
  uint64_t comm_us = 0;
  uint64_t answered_late_us = 0;  // StepResult.answeredLateMicros
};
// Adds a StepResult's expert load (if any) to `stats`' expert counters; whether it carried one. Throws on a
// malformed message, as decode_step_result.
bool add_expert_load(const wire_msg& result, SchedulerStats& stats);
// `prompt` (reused) gets the step's prompt logprobs.
StepResultInfo decode_step_result(const wire_msg& result, std::vector<StepSample>& samples,
                                  std::vector<StepPromptLogprobs>& prompt);
// A SubmitRequest as the scheduler's SequenceRequest (owner left 0) and back: the scheduler reads submissions with
// the first, and hands sequences back to the router (continuations, SequenceRequest::resumed) with the second.
// decode_submit throws on a malformed message (capnp's exceptions).
SequenceRequest decode_submit(const wire_msg& submit);
// With `kv` (a continuation moving with its KV: actors/kv_move.hpp gather_kv's KvExport) it carries that too.
wire_msg encode_submit(const SequenceRequest& request, const wire_msg* kv = nullptr);

// One StreamDeltaBatch of `updates`; a request found in `queue_micros` gets that queue time in its delta.
wire_msg encode_stream_deltas(const std::vector<const SequenceUpdate*>& updates,
                              const std::unordered_map<uint64_t, uint64_t>& queue_micros);

}  // namespace actord
