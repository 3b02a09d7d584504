// GPU time per backend primitive, for finding where a step's time goes on a lent GPU (ACTORD_CUDA_PROFILE=1 in the
// environment of the process that holds the CUDA backend). Off: every call is one branch.
//
// Contract: begin(name) / end() bracket the work one primitive queues on the stream with two CUDA events; collect()
// (called at each step's start, when the previous step's events are done or nearly) adds each pair's elapsed time
// to its name's total; the host time from one collect() to the next is the step's wall time. report() (at the
// backend's end) writes one line per name to stderr: calls, total ms, mean us, share of the GPU time, and per step
// the GPU's busy time against the wall time (their difference: the GPU waiting on the host, launch gaps); then the
// same per name for the last step with work alone.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace actord::cuda {

class KernelTimes {
 public:
  KernelTimes() {
    const char* env = std::getenv("ACTORD_CUDA_PROFILE");
    on_ = env && std::strcmp(env, "0") != 0 && env[0] != '\0';
  }
  KernelTimes(const KernelTimes&) = delete;
  KernelTimes& operator=(const KernelTimes&) = delete;
  ~KernelTimes() {
    for (auto& [a, b] : events_) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }

  bool on() const { return on_; }

  void begin(const char* name, cudaStream_t stream) {
    if (!on_) return;
    if (used_ == events_.size()) {
      cudaEvent_t a = nullptr, b = nullptr;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      events_.emplace_back(a, b);
    }
    names_.push_back(name);
    cudaEventRecord(events_[used_].first, stream);
  }
  void end(cudaStream_t stream) {
    if (!on_) return;
    cudaEventRecord(events_[used_].second, stream);
    ++used_;
  }

  void collect() {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (steps_ > 0) wall_ms_ += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    double busy = 0;
    if (used_ > 0) last_step_.clear();
    for (size_t i = 0; i < used_; ++i) {
      float ms = 0;
      cudaEventSynchronize(events_[i].second);
      if (cudaEventElapsedTime(&ms, events_[i].first, events_[i].second) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      auto& [calls, total] = totals_[names_[i]];
      ++calls;
      total += ms;
      busy += ms;
      auto& [last_calls, last_total] = last_step_[names_[i]];
      ++last_calls;
      last_total += ms;
    }
    if (used_ > 0) {
      ++steps_;
      busy_ms_ += busy;
    }
    used_ = 0;
    names_.clear();
  }

  void report() {
    if (!on_) return;
    collect();
    double all = 0;
    for (const auto& entry : totals_) all += entry.second.second;
    std::vector<std::pair<std::string, std::pair<long, double>>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    std::fprintf(stderr, "cuda profile: %ld steps, GPU busy %.3f ms a step, wall %.3f ms a step (from one step's start "
                         "to the next)\n",
                 steps_, steps_ ? busy_ms_ / double(steps_) : 0.0, steps_ > 1 ? wall_ms_ / double(steps_ - 1) : 0.0);
    for (const auto& [name, stat] : rows) {
      std::fprintf(stderr, "cuda profile: %-28s %8ld calls %10.3f ms %9.2f us each %5.1f%%\n", name.c_str(),
                   stat.first, stat.second, 1000.0 * stat.second / double(std::max(1L, stat.first)),
                   all > 0 ? 100.0 * stat.second / all : 0.0);
    }
    // The last step alone: free of the first use of its shapes (cuBLAS and the driver load kernels lazily), which
    // the totals above include where a run has few steps (one warm-up and one timed prefill).
    std::vector<std::pair<std::string, std::pair<long, double>>> last(last_step_.begin(), last_step_.end());
    std::sort(last.begin(), last.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    for (const auto& [name, stat] : last) {
      std::fprintf(stderr, "cuda profile, last step: %-28s %6ld calls %10.3f ms %9.2f us each\n", name.c_str(),
                   stat.first, stat.second, 1000.0 * stat.second / double(std::max(1L, stat.first)));
    }
  }

 private:
  bool on_ = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;  // reused step after step
  std::vector<const char*> names_;                           // [used_]
  size_t used_ = 0;
  std::map<std::string, std::pair<long, double>> totals_;    // name -> calls, ms
  std::map<std::string, std::pair<long, double>> last_step_; // the same for the last step with work
  long steps_ = 0;
  double busy_ms_ = 0, wall_ms_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

// Brackets one primitive's work: KernelTimed t(times_, "gemm", stream_);
class KernelTimed {
 public:
  KernelTimed(KernelTimes& times, const char* name, cudaStream_t stream) : times_(times), stream_(stream) {
    times_.begin(name, stream_);
  }
  ~KernelTimed() { times_.end(stream_); }
  KernelTimed(const KernelTimed&) = delete;
  KernelTimed& operator=(const KernelTimed&) = delete;

 private:
  KernelTimes& times_;
  cudaStream_t stream_;
};

}  // namespace actord::cuda
