#include "executors/device_sampling_plan.hpp"

namespace actord {

void plan_device_sampling(std::span<const SampleRequest> requests, int vocab, DeviceSamplingPlan& plan) {
  plan.params.clear();
  plan.ops.clear();
  for (const SampleRequest& request : requests) {
    const SamplingOptions& o = *request.options;
    DeviceSampleParams p;
    p.temperature = o.temperature;
    p.top_p = o.top_p;
    p.min_p = o.min_p;
    p.top_k = o.top_k;
    p.key = draw_key(o.seed, request.sample_index);
    p.host = o.logprobs >= 0 || (o.top_k > kDeviceSampleCandidates && o.top_k < vocab) || !request.allowed.empty();
    p.ops_first = static_cast<int32_t>(plan.ops.size());
    if (!p.host) {
      for (const LogitBias& b : o.logit_bias) plan.ops.push_back({b.id, DeviceSampleOp::kSubtract, -b.bias});
      if (request.history != nullptr && o.repetition_penalty != 1.0f) {
        for (const int32_t id : request.history->seen())
          plan.ops.push_back({id, DeviceSampleOp::kRepetition, o.repetition_penalty});
      }
      if (request.history != nullptr && (o.frequency_penalty != 0.0f || o.presence_penalty != 0.0f)) {
        for (const auto& [id, count] : request.history->output_counts()) {
          const float penalty = o.frequency_penalty * float(count) + (count > 0 ? o.presence_penalty : 0.0f);
          plan.ops.push_back({id, DeviceSampleOp::kSubtract, penalty});
        }
      }
      for (const int32_t id : request.masked_ids) plan.ops.push_back({id, DeviceSampleOp::kMask, 0.0f});
    }
    p.ops_count = static_cast<int32_t>(plan.ops.size()) - p.ops_first;
    plan.params.push_back(p);
  }
}

}  // namespace actord
