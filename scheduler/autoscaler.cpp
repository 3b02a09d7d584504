#include "scheduler/autoscaler.hpp"

#include <algorithm>

namespace actord {

AutoscaleSection resolved_autoscale(AutoscaleSection settings, int max_num_seqs) {
  if (settings.target_sequences == 0) settings.target_sequences = std::max(1, max_num_seqs / 2);
  return settings;
}

Autoscaler::Autoscaler(const AutoscaleSection& settings) : settings_(settings) {
  settings_.target_sequences = std::max(1, settings_.target_sequences);
}

int Autoscaler::wanted(const GroupLoad& load) const {
  auto ceil_div = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
  uint64_t want = ceil_div(load.sequences, uint64_t(settings_.target_sequences));
  if (settings_.target_prompt_tokens > 0)
    want = std::max(want, ceil_div(load.prefill_backlog, uint64_t(settings_.target_prompt_tokens)));
  return int(std::clamp<uint64_t>(want, uint64_t(settings_.min_replicas), uint64_t(settings_.max_replicas)));
}

std::optional<int> Autoscaler::look(Time now, int replicas, const GroupLoad& load) {
  if (replicas != last_replicas_) {
    last_replicas_ = replicas;
    up_since_.reset();
    down_since_.reset();
  }
  if (replicas < settings_.min_replicas) return settings_.min_replicas;
  if (replicas > settings_.max_replicas) return settings_.max_replicas;
  const int want = wanted(load);
  if (want > replicas) {
    down_since_.reset();
    if (!up_since_) {
      up_since_ = now;
      fewest_up_ = want;
    }
    fewest_up_ = std::min(fewest_up_, want);
    if (now - *up_since_ >= settings_.scale_up_after) return fewest_up_;
    return std::nullopt;
  }
  up_since_.reset();
  if (want < replicas) {
    if (!down_since_) {
      down_since_ = now;
      most_down_ = want;
    }
    most_down_ = std::max(most_down_, want);
    if (now - *down_since_ >= settings_.scale_down_after) return most_down_;
    return std::nullopt;
  }
  down_since_.reset();
  return std::nullopt;
}

}  // namespace actord
