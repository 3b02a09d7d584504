#include "scheduler/replica_router.hpp"

#include <algorithm>

namespace actord {

ReplicaRouter::ReplicaRouter(PhasePolicies policies, int block_size)
    : policies_(policies), block_size_(std::max(1, block_size)) {}

ReplicaRouter::Replica* ReplicaRouter::find(uint64_t replica) {
  auto it = std::find_if(replicas_.begin(), replicas_.end(), [&](const Replica& r) { return r.id == replica; });
  return it == replicas_.end() ? nullptr : &*it;
}

bool ReplicaRouter::contains(uint64_t replica) const {
  return std::any_of(replicas_.begin(), replicas_.end(), [&](const Replica& r) { return r.id == replica; });
}

void ReplicaRouter::add(uint64_t replica, bool warm_in, ReplicaRole role) {
  if (find(replica)) return;
  auto at = std::lower_bound(replicas_.begin(), replicas_.end(), replica,
                             [](const Replica& r, uint64_t id) { return r.id < id; });
  const bool peers = std::any_of(replicas_.begin(), replicas_.end(), [&](const Replica& r) { return r.role == role; });
  replicas_.insert(at, Replica{replica, 0, warm_in && peers ? kWarmStart : 1.0, 0.0, role});
}

double ReplicaRouter::weight(uint64_t replica) const {
  for (const Replica& r : replicas_)
    if (r.id == replica) return r.weight;
  return 0.0;
}

void ReplicaRouter::remove(uint64_t replica) {
  replicas_.erase(std::remove_if(replicas_.begin(), replicas_.end(), [&](const Replica& r) { return r.id == replica; }),
                  replicas_.end());
  // Prefixes that went there are forgotten lazily: route() ignores entries of replicas no longer here.
}

void ReplicaRouter::report_load(uint64_t replica, uint64_t outstanding_tokens) {
  if (Replica* r = find(replica)) {
    r->load = outstanding_tokens;
    r->weight = std::min(1.0, r->weight * 2.0);
  }
}

uint64_t ReplicaRouter::load(uint64_t replica) const {
  for (const Replica& r : replicas_)
    if (r.id == replica) return r.load;
  return 0;
}

ReplicaRouter::Replica* ReplicaRouter::least_loaded(const Candidates& candidate) {
  Replica* best = nullptr;
  for (Replica& r : replicas_)
    if (candidate(r) && (!best || r.effective() < best->effective())) best = &r;
  return best;
}

std::vector<uint64_t> ReplicaRouter::prefix_keys(std::span<const int32_t> prompt) const {
  std::vector<uint64_t> keys;
  const size_t blocks = std::min(prompt.size() / static_cast<size_t>(block_size_), kAffinityBlocks);
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the token ids, chained block to block
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t i = 0; i < static_cast<size_t>(block_size_); ++i) {
      uint32_t v = static_cast<uint32_t>(prompt[b * static_cast<size_t>(block_size_) + i]);
      for (int byte = 0; byte < 4; ++byte) {
        h ^= v & 0xffu;
        h *= 1099511628211ull;
        v >>= 8;
      }
    }
    keys.push_back(h);
  }
  return keys;
}

void ReplicaRouter::remember(uint64_t key, uint64_t replica) {
  auto it = affinity_.find(key);
  if (it != affinity_.end()) {
    lru_.erase(it->second.second);
    affinity_.erase(it);
  }
  lru_.push_front(key);
  affinity_.emplace(key, std::make_pair(replica, lru_.begin()));
  if (affinity_.size() > kAffinityEntries) {
    affinity_.erase(lru_.back());
    lru_.pop_back();
  }
}

std::optional<uint64_t> ReplicaRouter::route(std::span<const int32_t> prompt, uint32_t max_tokens, uint32_t samples,
                                             Phase phase) {
  if (replicas_.empty()) return std::nullopt;
  Candidates candidate{phase, false};
  candidate.any = std::none_of(replicas_.begin(), replicas_.end(), candidate);
  Replica* chosen = nullptr;
  switch (phase == Phase::prefill ? policies_.prefill : policies_.decode) {
    case RoutePolicy::round_robin:
      // In turn; a warming replica only when its credit reaches 1 (one always does within 1 / kWarmStart turns).
      while (!chosen) {
        Replica& r = replicas_[next_[size_t(phase)]++ % replicas_.size()];
        if (!candidate(r)) continue;
        r.credit += r.weight;
        if (r.credit >= 1.0 - 1e-9) {
          r.credit -= 1.0;
          chosen = &r;
        }
      }
      break;
    case RoutePolicy::least_tokens:
      chosen = least_loaded(candidate);
      break;
    case RoutePolicy::prefix_affinity: {
      const std::vector<uint64_t> keys = prefix_keys(prompt);
      Replica* least = least_loaded(candidate);
      for (auto key = keys.rbegin(); key != keys.rend() && !chosen; ++key) {
        auto hit = affinity_.find(*key);
        if (hit == affinity_.end()) continue;
        Replica* r = find(hit->second.first);
        if (!r || !candidate(*r)) continue;  // that replica left, or does not serve this phase
        const double load = double(r->load) / r->weight, least_load = double(least->load) / least->weight;
        const bool overloaded = load > least_load + double(kAffinityMinGap) && load > least_load * (1.0 + kAffinitySlack);
        chosen = overloaded ? least : r;
      }
      if (!chosen) chosen = least;
      // A decode replica's cache holds what was moved there, not prompts prefilled: prefixes stay with the others.
      if (chosen->role != ReplicaRole::decode)
        for (uint64_t key : keys) remember(key, chosen->id);
      break;
    }
  }
  // A prefill replica computes the prompt and the first token; the rest is a decode replica's.
  const bool prefill_only = chosen->role == ReplicaRole::prefill && !candidate.any;
  chosen->load += prompt.size() + (prefill_only ? 1 : uint64_t(max_tokens) * std::max<uint32_t>(1, samples));
  return chosen->id;
}

}  // namespace actord
