// The synchronisation of a group whose ranks share memory (threads of one process, or processes mapping one
// segment): each rank counts the phases it has published, and waits until its peers have published as many.
//
// Contract: RankState and AbortState hold only lock-free atomics and plain bytes, so they may live in a shared
// memory segment; whoever creates them constructs them once (placement new) before any rank attaches. A rank
// writes what its peers will read, then publish(); after wait_all() it may read what every peer wrote before its
// own publish() of the same phase. Counters wrap; they are compared by difference, so ranks may be any number of
// phases apart below 2^31. abort() breaks the group for every rank (the first reason is kept) and wakes them all.
// A rank's PhaseBoard is used by one thread at a time, except abort(), which any thread may call.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comms/collectives/futex_sync.hpp"
#include "core/status.hpp"

namespace actord::coll {

struct alignas(64) RankState {
  SyncWord progress;                // phases this rank has published
  std::atomic<int32_t> pid{0};      // the rank's process, once it joined
  std::atomic<uint32_t> joined{0};  // 1 once the rank joined
  std::atomic<uint32_t> left{0};    // 1 once the rank closed its communicator
};

struct AbortState {
  std::atomic<uint32_t> state{0};  // 0 running, 1 an abort being recorded, 2 aborted (reason readable)
  int32_t rank = -1;               // who aborted
  char reason[480] = {};
};

class PhaseBoard {
 public:
  // ranks: [size]. Liveness of peers in other processes is checked through pidfds once watch_peers() ran.
  PhaseBoard(AbortState* abort, RankState* ranks, int size, int rank, std::chrono::milliseconds timeout);
  ~PhaseBoard();
  PhaseBoard(const PhaseBoard&) = delete;
  PhaseBoard& operator=(const PhaseBoard&) = delete;

  // Opens a pidfd for each peer whose pid differs from this process's, so that a dead peer process is noticed
  // within one sleep slice instead of at the timeout.
  void watch_peers();

  void publish();
  // Waits until every peer has published at least as many phases as this rank.
  Status wait_all();
  // Waits for one peer to have published `target` phases.
  Status wait_rank(int peer, uint32_t target, Clock::time_point deadline);
  uint32_t published() const { return published_; }

  // Why waiting for `peer` is pointless: the group was aborted, the peer left or its process died.
  std::optional<Error> failure(int peer) const;
  std::optional<Error> aborted() const;
  void abort(std::string_view reason);
  void leave();  // marks this rank gone and wakes whoever waits for it

  Clock::time_point deadline() const { return Clock::now() + timeout_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  Error timeout_error(int peer, std::string_view what) const;
  RankState& rank_state(int r) { return ranks_[r]; }

 private:
  AbortState* abort_;
  RankState* ranks_;
  int size_;
  int rank_;
  std::chrono::milliseconds timeout_;
  uint32_t published_;
  std::vector<int> pidfds_;  // [size]: a pidfd, -1 where not watched, -2 for a peer already gone
};

// a - b as a signed distance between wrapping counters.
inline int32_t counter_distance(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b); }

}  // namespace actord::coll
