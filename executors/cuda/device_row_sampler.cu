#include "executors/cuda/device_row_sampler.hpp"

#include <cstdio>

#include "executors/cpu/thread_pool.hpp"
#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_memory.hpp"

namespace actord::cuda {

int32_t* DeviceRowSampler::launch(float* logits, int rows, int vocab) {
  const size_t params_bytes = plan_.params.size() * sizeof(DeviceSampleParams);
  const size_t ops_bytes = plan_.ops.size() * sizeof(DeviceSampleOp);
  const size_t tokens_bytes = size_t(rows) * sizeof(int32_t);
  reserve_bytes(device_plan_, device_plan_bytes_, params_bytes + ops_bytes + tokens_bytes);
  auto* base = static_cast<unsigned char*>(device_plan_.get());
  // From pageable memory: staged before the call returns, so plan_ may change for the next step at once.
  ACTORD_CUDA_CHECK(cudaMemcpyAsync(base, plan_.params.data(), params_bytes, cudaMemcpyHostToDevice, stream_));
  if (ops_bytes > 0) {
    ACTORD_CUDA_CHECK(
        cudaMemcpyAsync(base + params_bytes, plan_.ops.data(), ops_bytes, cudaMemcpyHostToDevice, stream_));
  }
  auto* tokens = reinterpret_cast<int32_t*>(base + params_bytes + ops_bytes);
  launch_device_sampling(logits, rows, vocab, reinterpret_cast<const DeviceSampleParams*>(base),
                         reinterpret_cast<const DeviceSampleOp*>(base + params_bytes), tokens, stream_);
  return tokens;
}

bool DeviceRowSampler::draws_all(std::span<const SampleRequest> requests, int vocab) {
  if (!path_.on || !path_.checked) return false;
  plan_device_sampling(requests, vocab, plan_);
  for (const DeviceSampleParams& p : plan_.params)
    if (p.host) return false;
  return true;
}

const int32_t* DeviceRowSampler::sample_deferred(float* logits, int rows, int vocab,
                                                 std::span<const SampleRequest> requests) {
  plan_device_sampling(requests, vocab, plan_);
  return launch(logits, rows, vocab);
}

void DeviceRowSampler::sample(float* logits, int rows, int vocab, std::span<const SampleRequest> requests,
                              std::span<SampledToken> out) {
  const size_t row_floats = size_t(vocab);
  plan_device_sampling(requests, vocab, plan_);
  const bool checking = checks_ < kCheckedSamplings;
  if (checking) {  // the raw rows, before the GPU applies penalties in place
    raw_rows_.resize(size_t(rows) * row_floats);
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(raw_rows_.data(), logits, raw_rows_.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
  }
  const int32_t* tokens = launch(logits, rows, vocab);
  const size_t tokens_bytes = size_t(rows) * sizeof(int32_t);
  drawn_.resize(size_t(rows));
  ACTORD_CUDA_CHECK(cudaMemcpyAsync(drawn_.data(), tokens, tokens_bytes, cudaMemcpyDeviceToHost, stream_));
  ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // The rows the host samples: every row while checking (raw_rows_ holds them in order), else those left.
  host_rows_.clear();
  for (int r = 0; r < rows; ++r) {
    if (checking || drawn_[size_t(r)] < 0) {
      host_rows_.push_back(r);
    } else {
      out[size_t(r)] = SampledToken{drawn_[size_t(r)], 0.0f, {}};
    }
  }
  if (host_rows_.empty()) return;
  if (!checking) {  // the rows as the GPU left them, one copy each, one wait
    raw_rows_.resize(host_rows_.size() * row_floats);
    for (size_t i = 0; i < host_rows_.size(); ++i) {
      ACTORD_CUDA_CHECK(cudaMemcpyAsync(raw_rows_.data() + i * row_floats, logits + size_t(host_rows_[i]) * row_floats,
                                        row_floats * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    }
    ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  host_requests_.clear();
  for (const int r : host_rows_) {
    SampleRequest request = requests[size_t(r)];
    if (!checking && !plan_.params[size_t(r)].host) {  // penalised and masked on the GPU already
      request.history = nullptr;
      request.masked_ids = {};
    }
    host_requests_.push_back(request);
  }
  host_samples_.resize(host_rows_.size());
  host_sampler_.sample_rows(raw_rows_.data(), vocab, host_requests_, host_samples_, pool_);
  int differ = -1;
  for (size_t i = 0; i < host_rows_.size(); ++i) {
    const int r = host_rows_[i];
    out[size_t(r)] = host_samples_[i];
    const int32_t drawn = drawn_[size_t(r)];
    if (checking && drawn >= 0 && drawn != host_samples_[i].token && differ < 0) differ = r;
  }
  if (!checking) return;
  ++checks_;
  if (differ >= 0) {
    path_.disable("off: row " + std::to_string(differ) + " drew " + std::to_string(drawn_[size_t(differ)]) +
                  " on the GPU, " + std::to_string(out[size_t(differ)].token) + " on the host");
    std::fprintf(stderr, "cuda:%d: device sampling %s\n", device_, path_.state.c_str());
  } else if (checks_ == kCheckedSamplings) {
    path_.checked = true;
    path_.state = "on";
  } else {
    path_.state = "checking";
  }
}

}  // namespace actord::cuda
