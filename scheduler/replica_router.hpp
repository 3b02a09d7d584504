// Which data parallel replica takes a request (the router actor's logic, actors/router_actor.hpp).
//
// Contract: pure logic, no actors, no clocks. Replicas are named by the caller's ids; only those added and not
// removed take requests. route() books the request's tokens (prompt + max_tokens x samples) on the replica it
// picks, as an estimate until that replica reports its own count (report_load: the tokens its scheduler still has
// to compute and generate), which replaces it. Policies:
// - round_robin: replicas in turn.
// - least_tokens: the replica with the fewest outstanding tokens (ties: the lowest id).
// - prefix_affinity: a prompt whose leading blocks (block_size tokens each, up to kAffinityBlocks) were routed
//   before goes where its longest such prefix went, so that replica's prefix cache serves it, unless that
//   replica's load exceeds the least loaded one's by more than kAffinitySlack (relative) and kAffinityMinGap
//   tokens (absolute); then, and for prompts shorter than a block, least_tokens. Remembers the last kAffinityEntries
//   prefixes.
// Each phase (below) has its own policy (PhasePolicies: a prefill group may route by prefix_affinity while the decode
// group balances by least_tokens); set_policies changes them for the requests routed from then on.
// Warm-in: a replica added with warm_in beside others (a scale-up, a rebuilt or reshaped replica) starts with a weight of
// kWarmStart and takes that share of what an equal one would: least_tokens and prefix_affinity see its load divided
// by its weight, round_robin passes it over until its credit (its weight added each turn) reaches 1. Each load
// report (its scheduler finished sequences: it proves it serves) doubles the weight, up to 1. A replica added with
// no other of its role starts at 1: there is no one else to serve.
// Roles (prefill/decode disaggregation, groups[].role): each replica has one (ReplicaRole::both unless added with
// another). A request in its prefill phase (nothing generated yet) goes to replicas of role prefill or both, one in
// its decode phase (a continuation with generated tokens: handed on after its prefill, or back after a failure) to
// those of role decode or both; each policy chooses among those. When no replica has a role for the phase, every
// replica is a candidate (any replica can run either phase). A prefill replica books a request's prompt only.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/route_policy.hpp"

namespace actord {

class ReplicaRouter {
 public:
  static constexpr size_t kAffinityBlocks = 8;
  static constexpr size_t kAffinityEntries = 1 << 16;
  static constexpr double kAffinitySlack = 0.5;
  static constexpr uint64_t kAffinityMinGap = 2048;

  ReplicaRouter(PhasePolicies policies, int block_size);
  ReplicaRouter(RoutePolicy policy, int block_size) : ReplicaRouter(PhasePolicies{policy, policy}, block_size) {}

  void set_policies(PhasePolicies policies) { policies_ = policies; }
  PhasePolicies policies() const { return policies_; }

  static constexpr double kWarmStart = 0.125;

  enum class Phase { prefill, decode };

  void add(uint64_t replica, bool warm_in = false, ReplicaRole role = ReplicaRole::both);  // takes requests from now on (load 0)
  double weight(uint64_t replica) const;  // its warm-in weight: kWarmStart .. 1 (0 for an unknown one)
  void remove(uint64_t replica);  // takes none from now on
  bool empty() const { return replicas_.empty(); }
  size_t size() const { return replicas_.size(); }
  bool contains(uint64_t replica) const;

  // The replica for a request in `phase`, or nothing when none takes requests.
  std::optional<uint64_t> route(std::span<const int32_t> prompt, uint32_t max_tokens, uint32_t samples = 1,
                                Phase phase = Phase::prefill);
  void report_load(uint64_t replica, uint64_t outstanding_tokens);
  uint64_t load(uint64_t replica) const;  // 0 for an unknown one

 private:
  struct Replica {
    uint64_t id;
    uint64_t load = 0;
    double weight = 1.0;  // warm-in
    double credit = 0.0;  // round_robin: its weight added each turn
    ReplicaRole role = ReplicaRole::both;
    double effective() const { return double(load + 1) / weight; }
  };
  // Which replicas a request may go to: those whose role serves its phase, or all when none does.
  struct Candidates {
    Phase phase = Phase::prefill;
    bool any = false;
    bool operator()(const Replica& r) const {
      return any || r.role == ReplicaRole::both ||
             r.role == (phase == Phase::prefill ? ReplicaRole::prefill : ReplicaRole::decode);
    }
  };
  Replica* find(uint64_t replica);
  Replica* least_loaded(const Candidates& candidate);
  // Chained hashes of the prompt's leading full blocks (up to kAffinityBlocks).
  std::vector<uint64_t> prefix_keys(std::span<const int32_t> prompt) const;
  void remember(uint64_t key, uint64_t replica);

  PhasePolicies policies_;
  int block_size_;
  std::vector<Replica> replicas_;  // in id order
  size_t next_[2] = {0, 0};        // round_robin: each phase's turn
  // prefix_affinity: key -> replica, with the keys in least-recently-used order.
  std::list<uint64_t> lru_;
  std::unordered_map<uint64_t, std::pair<uint64_t, std::list<uint64_t>::iterator>> affinity_;
};

}  // namespace actord
