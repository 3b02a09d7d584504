// What a device backend needs to sample rows where they are (executors/cuda/device_sampler.cu), planned on the host
// from the rows' requests (pure C++: no CUDA, tested in CI).
//
// Contract: one DeviceSampleParams per request, in order; a row the device does not sample (logprobs asked: they
// are of the raw row; a top-k above kDeviceSampleCandidates; a response format's allowed ids) has host = 1 and no
// operations. The others get the
// operations executors/sampler.cpp's penalise_and_mask applies, in its order: each logit bias (kSubtract of its
// negation: l - (-b) is l + b exactly), the repetition penalty of every id the history has seen, then the frequency
// and presence penalties of every generated id (value = frequency x count + presence, as the CPU computes it in
// float), then the masked ids; and the draw's key (sampler.hpp's draw_key).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "executors/sampler.hpp"

namespace actord {

constexpr int kDeviceSampleCandidates = 1024;  // most candidates a device draw may rank (a row's block of threads)

struct DeviceSampleParams {
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
  int32_t top_k = 0;
  uint64_t key = 0;
  int32_t ops_first = 0, ops_count = 0;
  int32_t host = 0;  // 1: left to the host, untouched
};

struct DeviceSampleOp {
  static constexpr int32_t kRepetition = 0, kSubtract = 1, kMask = 2;
  int32_t id = 0;
  int32_t kind = kRepetition;
  float value = 0.0f;  // the repetition penalty r, or what is subtracted
};

struct DeviceSamplingPlan {
  std::vector<DeviceSampleParams> params;
  std::vector<DeviceSampleOp> ops;
};

void plan_device_sampling(std::span<const SampleRequest> requests, int vocab, DeviceSamplingPlan& plan);

}  // namespace actord
