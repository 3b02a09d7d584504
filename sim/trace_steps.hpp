// The steps a `--trace` recorded (actors/trace_sink.hpp): every scheduler step's shape and share of the wall clock,
// what `actord calibrate` fits a step cost model to.
//
// Contract: pure. Reads Chrome trace JSON as TraceSink writes it: events of "ph": "X", "cat": "scheduler",
// "name": "step" with args step, seqs, prefill_tokens, decode_tokens, attention_pairs and share_us (events without
// share_us, written before shapes were recorded, are skipped). Steps numbered `skip` or below (each scheduler's
// warm-up) are left out. With `groups`, only the steps whose arg "group" (the topology group of the replica that ran
// them) is one of those. Errors name `source`.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "sim/step_cost_model.hpp"

namespace actord::sim {

Result<std::vector<MeasuredStep>> steps_of_trace(const nlohmann::json& trace, uint64_t skip, const std::string& source,
                                                 const std::vector<std::string>& groups = {});

}  // namespace actord::sim
