// How long the coordinator waits before its next attempt to rebuild a lost replica whose rebuilds keep failing (a
// node that went down, a worker binary that no longer starts). Pure; used by coordinator_actor.cpp.
//
// Contract: the first kQuickRebuilds failed attempts are retried kQuickRebuildDelay apart (a rank lost to a
// transient fault is back at once); after that the replica is marked failed and retried with a wait that doubles
// from twice kQuickRebuildDelay, capped at `longest` (engine.rebuild_retry_max). It is never given up: a node that
// comes back gets its replica again without an operator's apply.
#pragma once

#include <algorithm>
#include <chrono>

namespace actord {

constexpr int kQuickRebuilds = 3;
constexpr std::chrono::milliseconds kQuickRebuildDelay{1000};

// The wait after the `failed`-th failed attempt in a row (1 = the first).
inline std::chrono::milliseconds rebuild_delay(int failed, std::chrono::milliseconds longest) {
  if (failed <= kQuickRebuilds) return std::min(kQuickRebuildDelay, longest);
  const int doublings = std::min(failed - kQuickRebuilds, 20);  // 2^20 s is far past any cap
  return std::min(kQuickRebuildDelay * (int64_t{1} << doublings), longest);
}

// Whether the replica counts as failed after `failed` failed attempts in a row (status, autoscaling).
inline bool rebuilds_exhausted(int failed) { return failed >= kQuickRebuilds; }

}  // namespace actord
