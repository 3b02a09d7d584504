// Helpers for scripted BatchScheduler timelines (no model, no actors).
#pragma once

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "scheduler/batch_scheduler.hpp"

namespace actord::test {

// A request with prompt 10, 11, ... of `prompt_len` tokens.
inline SequenceRequest request(uint64_t id, int prompt_len, uint32_t max_tokens, std::vector<int32_t> stop = {}) {
  SequenceRequest r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(10 + i);
  r.max_tokens = max_tokens;
  r.stop_ids = std::move(stop);
  return r;
}

// Answers every sampling slice of the plan (the oldest step in flight) with `token`; a forking slice's sample i
// (seq_id + i) with token + i; a slice with drafts with `token` for each of its rows.
inline std::vector<SequenceUpdate> answer(BatchScheduler& s, const StepPlan& plan, int32_t token) {
  std::vector<StepSample> sampled;
  for (const auto& slice : plan.slices) {
    if (!slice.sample) continue;
    for (uint32_t f = 0; f < std::max<uint32_t>(slice.forks, 1); ++f)
      sampled.push_back(StepSample{slice.seq_id + f, token + static_cast<int32_t>(f), std::nullopt});
    for (int d = 0; d < slice.drafts; ++d) sampled.push_back(StepSample{slice.seq_id, token, std::nullopt});
  }
  const auto updates = s.on_step_result(sampled);
  return {updates.begin(), updates.end()};
}

}  // namespace actord::test
