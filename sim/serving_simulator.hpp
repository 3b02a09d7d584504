// The serving simulator: a fleet of replicas played out on a simulated clock, each with the engine's own batcher
// (scheduler/batch_scheduler.hpp) and the engine's router (scheduler/replica_router.hpp), its steps priced by a
// calibrated step cost model (sim/step_cost_model.hpp). Requests arrive as `actord bench serve` sends them; the
// result is every request's token times, as a client would see them.
//
// What it models: continuous batching with chunked prefill, the token budget, max_num_seqs, the KV pool (preemption
// by recompute), the prefix cache, routing by policy and role, and prefill/decode hand-offs (the sequence leaves
// its prefill replica after its first token and starts decoding HandOffCost later). A replica runs one step at a
// time, each taking its predicted time (the calibration measured each step's share of the wall clock, with the
// engine's planning ahead and round trips in it); tokens reach clients when their step ends.
// Autoscaling (a group with `autoscale`): the engine's own Autoscaler looks at the group's running + waiting
// sequences every interval while requests remain; an added replica serves `start_s` after the decision, at a full
// share, and the group's others hand back the sequences they have not started (as a scale-up does in the engine);
// a retired one takes no more requests, hands back what waits and finishes what runs.
// What it does not: speculative decoding (drafts are off), sampling (every token is the same non-stop id, so
// requests end by max_tokens), memory or cores shared between replicas (each runs as calibrated).
//
// Contract: pure and deterministic: no clocks, no threads; the same inputs give the same outputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/route_policy.hpp"
#include "core/status.hpp"
#include "core/topology_config.hpp"
#include "scheduler/batch_scheduler.hpp"
#include "sim/cost_profile.hpp"

namespace actord::sim {

struct SimRequest {
  double arrival_s = 0;   // when the client would send it if a slot of the concurrency were free
  std::vector<int32_t> prompt;
  uint32_t max_tokens = 1;
};

struct SimReplicaGroup {
  std::string name;
  int replicas = 1;
  ReplicaRole role = ReplicaRole::both;
  SchedulerLimits limits;   // as the engine gives the group's schedulers
  uint32_t kv_blocks = 0;   // each replica's
  StepCostModel cost;
  AutoscaleSection autoscale;  // active(): resized by its load (target_sequences resolved); `replicas` to start with
  double start_s = 0;          // how long a replica the autoscaler adds takes to serve
};

struct SimFleet {
  std::vector<SimReplicaGroup> groups;
  PhasePolicies router;  // each phase's (phase_policies of the topology)
  int block_size = 16;
  HandOffCost handoff;
};

struct SimOutcome {
  double sent_s = 0;                // when the client sent it (arrival, or later when the concurrency held it)
  std::vector<double> token_s;      // when each generated token reached the client
  std::string error;                // refused by the batcher (too long, ...); empty when served
};

struct SimReplicaStats {
  std::string group;
  uint64_t steps = 0;
  double busy_s = 0;
  uint64_t prefill_tokens = 0, decode_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t handoffs = 0;
};

struct SimResize {
  double at_s = 0;  // when the new size took effect (an added replica serves, a retired one stops taking requests)
  std::string group;
  int from = 0, to = 0;
};

struct SimReport {
  std::vector<SimOutcome> requests;  // in the order given
  std::vector<SimReplicaStats> replicas;  // every replica that served, those added by autoscaling after the others
  std::vector<SimResize> resizes;    // autoscaling's, in time order
  double end_s = 0;                  // when the last token reached its client
};

// Plays `requests` (arrival_s ascending) through `fleet`, at most `concurrency` in flight (each sent when it arrives
// and a slot is free, as bench serve sends them). Errors: a fleet without replicas, a group without kv_blocks or
// a fitted cost model, an autoscaled group starting outside its bounds, requests out of order.
Result<SimReport> simulate(const SimFleet& fleet, const std::vector<SimRequest>& requests, int concurrency);

}  // namespace actord::sim
