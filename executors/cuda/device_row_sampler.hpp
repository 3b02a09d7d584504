// Backend::sample_rows for the CUDA backend: rows of logits sampled where they are (device_sampler.cu's kernel, a
// block per row, as executors/device_sampling_plan.hpp plans them), the rows the plan leaves (logprobs, a top-k above
// kDeviceSampleCandidates) downloaded and drawn on the host over a pool (executors/sampler.hpp's BatchSampler).
//
// Contract: sample() takes logits [rows, vocab] in device memory, every earlier launch on `stream` already queued,
// and fills out as executors/sampler.hpp would (the logits are changed in place: penalties and masks); it waits for
// the stream. Its first kCheckedSamplings calls draw every row on the host too, from a copy of the raw rows: a token
// that differs turns the GPU path off (on() false, state() says why; the host's tokens are kept). The pool is the
// caller's and outlives this object.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "executors/cuda/checked_path.hpp"
#include "executors/device_sampling_plan.hpp"
#include "executors/sampler.hpp"

namespace actord::cpu {
class ThreadPool;
}

namespace actord::cuda {

class DeviceRowSampler {
 public:
  DeviceRowSampler(int device, cudaStream_t stream, cpu::ThreadPool& pool)
      : device_(device), stream_(stream), pool_(pool) {}

  bool on() const { return path_.on; }
  const std::string& state() const { return path_.state; }
  void disable(std::string why) { path_.disable(std::move(why)); }

  void sample(float* logits, int rows, int vocab, std::span<const SampleRequest> requests,
              std::span<SampledToken> out);
  // Whether sample_deferred would draw every row of these requests on the GPU: the path on and past its checks, and
  // no row the plan leaves to the host (logprobs, a top-k above kDeviceSampleCandidates).
  bool draws_all(std::span<const SampleRequest> requests, int vocab);
  // sample() without waiting, for a step that runs ahead (draws_all said yes): the tokens stay on the device, `rows`
  // of them where the returned pointer says, valid until the next call, in order behind the stream's work.
  const int32_t* sample_deferred(float* logits, int rows, int vocab, std::span<const SampleRequest> requests);

 private:
  static constexpr int kCheckedSamplings = 3;  // calls checked row by row against the host sampler
  // The plan (plan_) and a place for the tokens on the device; the launch behind the stream's work.
  int32_t* launch(float* logits, int rows, int vocab);

  int device_;
  cudaStream_t stream_;
  cpu::ThreadPool& pool_;
  CheckedPath path_;
  int checks_ = 0;
  DeviceSamplingPlan plan_;
  std::shared_ptr<void> device_plan_;  // the plan's params and ops, then the tokens, on the device
  size_t device_plan_bytes_ = 0;
  std::vector<int32_t> drawn_;                 // the GPU's tokens (-1: left to the host)
  std::vector<float> raw_rows_;                // rows downloaded for the host sampler
  std::vector<int> host_rows_;                 // the rows the host samples
  std::vector<SampleRequest> host_requests_;
  std::vector<SampledToken> host_samples_;
  BatchSampler host_sampler_;
};

}  // namespace actord::cuda
