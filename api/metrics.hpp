// The counters and latency histograms of `actord serve`, in Prometheus' text format (names as vLLM's, with the
// `actord_` prefix and a model label), plus the scheduler's statistics.
//
// Contract: thread-safe; observe_*() take seconds. text() renders everything; the scheduler's figures are left out
// when `stats` is null (the scheduler did not answer).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/scheduler_stats.hpp"

namespace actord {

class ApiMetrics {
 public:
  explicit ApiMetrics(std::string model_name);

  void count_request(const std::string& outcome);  // success | refused | error
  void count_tokens(uint64_t prompt, uint64_t generated);
  void count_lora_request(const std::string& adapter);  // a request naming LoRA adapter `adapter` as its model
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_tpot(double seconds);
  void observe_e2e(double seconds);
  void observe_queue_time(double seconds);

  std::string text(const SchedulerStats* stats, size_t requests_in_flight) const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bound, plus +Inf
    double sum = 0;
    uint64_t count = 0;
    void observe(double v);
  };
  std::string model_;
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> requests_;
  std::map<std::string, uint64_t> lora_requests_;  // by adapter
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, itl_, tpot_, e2e_, queue_;
};

}  // namespace actord
