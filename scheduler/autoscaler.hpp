// How many replicas a group with `autoscale:` wants, from its load (the coordinator looks every
// autoscale.interval and scales the group to what this says, actors/coordinator_actor.hpp).
//
// Contract: pure logic, no actors, no clocks of its own (the caller passes the time). Each look gives the group's
// serving replicas and their load: the sequences they hold (running + waiting) and their prefill backlog (tokens
// still to prefill). The group wants as many replicas as the larger of ceil(sequences / target_sequences) and, when
// target_prompt_tokens is set, ceil(backlog / target_prompt_tokens), within [min_replicas, max_replicas] (a
// prefill group's load lies in its prompts: its sequences leave as soon as they are prefilled). More replicas are
// asked for once the group has wanted more at every look for scale_up_after, and then the fewest it wanted over
// that time (a burst shorter than the window adds nothing); fewer once it has wanted fewer at every look for
// scale_down_after, and then the most it wanted over that time (as Kubernetes' autoscaler stabilises a scale-down
// over its window). A look whose replicas differ from the last look's (a scale was carried out, or someone else
// resized the group) starts both windows again. Replicas outside [min, max] (an apply or a manual scale) are asked
// back inside at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/topology_config.hpp"

namespace actord {

// A group's load at one look, summed over its serving replicas.
struct GroupLoad {
  GroupLoad(uint64_t sequences = 0, uint64_t prefill_backlog = 0)  // NOLINT: a count of sequences alone converts
      : sequences(sequences), prefill_backlog(prefill_backlog) {}
  uint64_t sequences;        // running + waiting
  uint64_t prefill_backlog;  // tokens still to prefill (BatchScheduler::prefill_backlog)
};

// `settings` with target_sequences resolved: 0 is half of the group's max_num_seqs (at least 1).
AutoscaleSection resolved_autoscale(AutoscaleSection settings, int max_num_seqs);

class Autoscaler {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // `settings` active; target_sequences resolved (at least 1).
  explicit Autoscaler(const AutoscaleSection& settings);

  // The replicas the group wants from one of its loads (`load` of `replicas` serving replicas) at `now`, or
  // nothing: keep them.
  std::optional<int> look(Time now, int replicas, const GroupLoad& load);

  // What one look alone wants: the larger of each target's ceil(load / target), within [min, max].
  int wanted(const GroupLoad& load) const;
  const AutoscaleSection& settings() const { return settings_; }

 private:
  AutoscaleSection settings_;
  int last_replicas_ = -1;
  std::optional<Time> up_since_, down_since_;  // since when every look wanted more (fewer)
  int fewest_up_ = 0;                          // the fewest wanted since up_since_
  int most_down_ = 0;                          // the most wanted since down_since_
};

}  // namespace actord
