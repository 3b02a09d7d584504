// A scheduler's step statistics: totals since it started. One plain struct seen by the scheduler actor that fills
// it, the Engine that returns it and the CLI that prints it; comms/codecs.hpp converts it to and from the wire.
//
// Contract: ACTORD_SCHEDULER_STATS_FIELDS lists every field once (name, the capnp field's CamelCase name, meaning);
// the struct, the wire codec and the JSON printers are generated from it, so a new statistic is one line here and
// one field in SchedulerStats of comms/schemas/actord.capnp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actord {

#define ACTORD_SCHEDULER_STATS_FIELDS(X)                                                                         \
  X(steps, Steps)                            /* ExecuteStep -> StepResult round trips */                        \
  X(tokens, Tokens)                          /* tokens fed to the worker, prefill + decode */                  \
  X(sampled_tokens, SampledTokens)                                                                              \
  X(round_trip_us, RoundTripMicros)          /* ExecuteStep sent -> StepResult received, summed */             \
  X(worker_compute_us, WorkerComputeMicros)  /* inside the worker's forward pass and sampling, summed */        \
  X(worker_comm_us, WorkerCommMicros)        /* of it, the driver rank's time in collectives (tp/pp), summed */ \
  X(scheduler_us, SchedulerMicros)           /* the scheduler's own thread CPU time, sends excluded, summed */  \
  X(scheduler_send_us, SchedulerSendMicros)  /* the scheduler's time handing messages to CAF (and waking), summed */ \
  X(preemptions, Preemptions)                                                                                   \
  X(max_seqs_in_step, MaxSeqsInStep)                                                                            \
  X(prefill_tokens, PrefillTokens)           /* fed in steps that carried prompt (or recomputed) tokens */      \
  X(prefill_us, PrefillMicros)               /* round trips of those steps */                                   \
  X(decode_tokens, DecodeTokens)             /* sampled in decode-only steps */                                 \
  X(decode_us, DecodeMicros)                 /* round trips of decode-only steps */                             \
  X(steps_planned_ahead, StepsPlannedAhead)  /* sent while the previous step was still executing */             \
  X(worker_idle_us, WorkerIdleMicros)        /* worker time between the end of a step and the start of the next */ \
  X(lease_blocks, LeaseBlocks)               /* KV blocks leased from the kv_pool now */                        \
  X(lease_grows, LeaseGrows)                 /* grants that grew the lease */                                   \
  X(lease_returns, LeaseReturns)             /* surpluses given back to the kv_pool */                          \
  X(prefix_query_blocks, PrefixQueryBlocks)  /* full prompt blocks looked up in the prefix cache */             \
  X(prefix_hit_blocks, PrefixHitBlocks)      /* of which cached: their prefill was skipped */                   \
  X(prefix_evictions, PrefixEvictions)       /* cached blocks evicted to make room */                           \
  X(prefix_cached_blocks, PrefixCachedBlocks) /* blocks in the prefix cache now */                          \
  X(swap_outs, SwapOuts)                     /* sequences preempted by swapping their KV to host memory */      \
  X(swap_ins, SwapIns)                       /* swapped sequences brought back */                               \
  X(swapped_blocks, SwappedBlocks)           /* KV blocks in host swap space now */                           \
  X(running_seqs, RunningSeqs)               /* sequences admitted and not finished, now */                     \
  X(waiting_seqs, WaitingSeqs)               /* sequences waiting for admission (swapped ones included), now */ \
  X(swapped_seqs, SwappedSeqs)               /* waiting sequences whose KV is in host swap space, now */ \
  X(eplb_rebalances, EplbRebalances)         /* EPLB placements sent to the ranks */                            \
  X(kv_moves_out, KvMovesOut)                /* sequences sent on with their KV (a reshape, a prefill hand-off) */ \
  X(kv_moves_in, KvMovesIn)                  /* continuations that arrived with KV (imported, or recomputed if that failed) */ \
  X(draft_tokens, DraftTokens)               /* speculative decoding: draft tokens verified */                  \
  X(accepted_draft_tokens, AcceptedDraftTokens) /* of which the samples confirmed (kept) */             \
  X(prefill_handoffs, PrefillHandoffs)       /* role prefill: prefilled sequences sent on to decode elsewhere */ \
  X(rebalanced_seqs, RebalancedSeqs)         /* waiting sequences handed back to be spread over a grown group */ \
  X(prefill_backlog, PrefillBacklog)         /* tokens of live sequences still to prefill, now */

struct SchedulerStats {
#define ACTORD_STATS_MEMBER(name, Wire) uint64_t name = 0;
  ACTORD_SCHEDULER_STATS_FIELDS(ACTORD_STATS_MEMBER)
#undef ACTORD_STATS_MEMBER
  // MoE models: experts per MoE layer, and the tokens routed to each, [layer * num_experts + expert], summed over
  // steps (counters; empty for a dense model).
  uint32_t num_experts = 0;
  std::vector<uint64_t> expert_tokens;
  // EPLB: the placement the ranks have now ([layer][slot], core/expert_placement.hpp; empty when off); of one
  // replica in a sum over several.
  std::vector<int32_t> expert_placement;
};

// Adds `part`'s expert counters to `total`'s (element by element, growing it).
inline void add_expert_tokens(SchedulerStats& total, const SchedulerStats& part) {
  if (total.expert_placement.empty()) total.expert_placement = part.expert_placement;
  if (part.expert_tokens.empty()) return;
  total.num_experts = part.num_experts;
  if (total.expert_tokens.size() < part.expert_tokens.size()) total.expert_tokens.resize(part.expert_tokens.size());
  for (size_t i = 0; i < part.expert_tokens.size(); ++i) total.expert_tokens[i] += part.expert_tokens[i];
}

// What happened between two snapshots of the same scheduler (`later` - `earlier`); the gauges
// (max_seqs_in_step, lease_blocks, prefix_cached_blocks, swapped_blocks, the sequence counts and prefill_backlog)
// are `later`'s.
inline SchedulerStats stats_between(const SchedulerStats& earlier, const SchedulerStats& later) {
  SchedulerStats d;
#define ACTORD_STATS_DIFF(name, Wire) d.name = later.name - earlier.name;
  ACTORD_SCHEDULER_STATS_FIELDS(ACTORD_STATS_DIFF)
#undef ACTORD_STATS_DIFF
  d.max_seqs_in_step = later.max_seqs_in_step;
  d.lease_blocks = later.lease_blocks;
  d.prefix_cached_blocks = later.prefix_cached_blocks;
  d.swapped_blocks = later.swapped_blocks;
  d.running_seqs = later.running_seqs;
  d.waiting_seqs = later.waiting_seqs;
  d.swapped_seqs = later.swapped_seqs;
  d.prefill_backlog = later.prefill_backlog;
  d.num_experts = later.num_experts;
  d.expert_tokens = later.expert_tokens;
  d.expert_placement = later.expert_placement;
  for (size_t i = 0; i < earlier.expert_tokens.size() && i < d.expert_tokens.size(); ++i)
    d.expert_tokens[i] -= earlier.expert_tokens[i];
  return d;
}

// Adds one scheduler's statistics to a total over several (data parallel replicas): counters and gauges add up,
// max_seqs_in_step is the largest. With counters_only (a replica that is gone) the gauges, max_seqs_in_step and the
// expert placement are left out.
inline void add_stats(SchedulerStats& total, const SchedulerStats& part, bool counters_only = false) {
  const SchedulerStats before = total;
#define ACTORD_STATS_ADD(name, Wire) total.name += part.name;
  ACTORD_SCHEDULER_STATS_FIELDS(ACTORD_STATS_ADD)
#undef ACTORD_STATS_ADD
  total.max_seqs_in_step = before.max_seqs_in_step > part.max_seqs_in_step ? before.max_seqs_in_step : part.max_seqs_in_step;
  if (counters_only) {
    total.lease_blocks = before.lease_blocks;
    total.prefix_cached_blocks = before.prefix_cached_blocks;
    total.swapped_blocks = before.swapped_blocks;
    total.running_seqs = before.running_seqs;
    total.waiting_seqs = before.waiting_seqs;
    total.swapped_seqs = before.swapped_seqs;
    total.prefill_backlog = before.prefill_backlog;
    total.max_seqs_in_step = before.max_seqs_in_step;
  }
  add_expert_tokens(total, part);
  if (counters_only) total.expert_placement = before.expert_placement;
}

}  // namespace actord
