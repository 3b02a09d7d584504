// Scheduling policies: which waiting requests a replica admits next, and whom it preempts, as a pure function of a
// snapshot of its queues. Built in: `fcfs` and `priority`; more come from out-of-tree plugins
// (plugins/plugin_api.hpp, ACTORD_POLICY_PLUGIN) through a PolicyRegistry (policy_registry.hpp).
//
// Contract: a policy is owned by one BatchScheduler and called from its thread only; decide() and victim() must be
// pure functions of their arguments (the scheduler calls them again when it plans again). decide() is called only
// when requests are waiting (a decode-only step costs the policy nothing). The scheduler applies a decision in its
// own terms: it admits in the given order and stops at the first request that does not fit (no skipping, so a
// large request is never starved by smaller ones behind it); preemptions (by recompute) happen only with no step
// in flight, so a decision to preempt drains the pipeline first; the scheduler carries a preemption out by recompute
// or by swap as engine.preemption_mode says. Ids not in the snapshot are ignored.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace actord {

// A sequence as a policy sees it.
struct PolicySequence {
  uint64_t id = 0;
  int32_t priority = 0;        // the request's priority: lower runs first (0 by default)
  uint64_t arrival = 0;        // submission order
  uint32_t prompt_len = 0;
  uint32_t num_tokens = 0;     // prompt + generated so far
  uint32_t max_tokens = 0;
  uint32_t blocks_held = 0;    // KV blocks it holds now (0 when waiting)
  uint32_t blocks_needed = 0;  // KV blocks it needs to hold all its tokens (waiting: its whole prefill)
};

// How a preempted sequence gives its KV blocks back (engine.preemption_mode).
enum class PreemptionMode {
  recompute,  // its blocks are freed; it prefills its tokens again when admitted again
  swap,       // its computed blocks are copied to host swap space and back on re-admission (recompute when full)
};

struct PolicySnapshot {
  // Queue order (preempted ones at the front, then arrival order). Swapped-out sequences are waiting too: they are
  // admitted like the others (their KV comes back from host memory instead of being recomputed).
  std::span<const PolicySequence> waiting;
  std::span<const PolicySequence> running;  // admission order
  std::span<const PolicySequence> swapped;  // the waiting sequences whose KV is in host swap space
  size_t free_blocks = 0;                   // of the scheduler's KV lease
  size_t total_blocks = 0;
  PreemptionMode preemption_mode = PreemptionMode::recompute;
  size_t swap_free_blocks = 0;              // host swap space left, in blocks
  int token_budget = 0;                     // max_num_batched_tokens of one step
  int max_num_seqs = 0;
};

struct PolicyDecision {
  std::vector<uint64_t> admit;    // waiting ids, in the order to admit them
  // Running ids to preempt before admitting, in the snapshot's preemption_mode (swap falls back to recompute for a
  // sequence whose computed blocks do not fit the host swap space left).
  std::vector<uint64_t> preempt;
  void clear() {
    admit.clear();
    preempt.clear();
  }
};

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  // Who is admitted next and who makes room for them. Called with waiting non-empty.
  virtual void decide(const PolicySnapshot& snapshot, PolicyDecision& decision) = 0;
  // Running sequences cannot all continue (KV blocks ran out): the index in `candidates` (running sequences not yet
  // planned in this step, in admission order; never empty) of the one to preempt.
  virtual size_t victim(std::span<const PolicySequence> candidates) = 0;
};

// First come, first served: admit in queue order, never preempt for an admission; the most recently admitted
// running sequence makes room when blocks run out.
std::unique_ptr<SchedulingPolicy> make_fcfs_policy();
// By the request's priority (lower first; ties by arrival). A waiting request whose priority is strictly better
// than a running one's preempts the worst running ones (highest priority value, latest arrival first) until it
// fits; blocks running out preempt the worst running one the same way.
std::unique_ptr<SchedulingPolicy> make_priority_policy();

}  // namespace actord
