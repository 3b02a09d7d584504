// Waiting for another thread or process without a lock: a 32-bit word to sleep on (a Linux futex) and a bounded
// wait that spins briefly, then sleeps, and gives up on a deadline or when told the peer is gone.
//
// Contract: SyncWord holds only lock-free atomics, so it may live in memory shared between processes (a futex on
// shared memory works across processes). The side that makes a waiter's condition true changes that state first,
// then calls signal(): it bumps the word and wakes sleepers, making a system call only when someone sleeps.
// wait_until() never misses such a signal and never blocks past its deadline by more than one sleep slice.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "core/status.hpp"

namespace actord::coll {

using Clock = std::chrono::steady_clock;

struct alignas(64) SyncWord {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "SyncWord must be address-free for shared memory");

// After making a waiter's condition true: bumps w and wakes its sleepers.
void signal(SyncWord& w);
// Wakes w's sleepers whether or not its value changed (they re-check their condition and give-up test).
void wake_all(SyncWord& w);
// Sleeps while w.value == seen, at most `limit`; may return early.
void sleep_while(SyncWord& w, uint32_t seen, std::chrono::nanoseconds limit);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How a waiter waits: it spins for kSpinTime (a peer on another core usually arrives within microseconds), then
// yields its core for up to kYieldTime (a peer on the same core, as when ranks outnumber free cores, runs at
// once instead of after a futex sleep and wake-up, which cost tens of microseconds), then sleeps on the futex.
inline constexpr std::chrono::microseconds kSpinTime{5};
inline constexpr std::chrono::microseconds kYieldTime{200};
// The longest sleep between two calls of a wait's give-up test.
inline constexpr std::chrono::milliseconds kSleepSlice{10};

void yield_core();
// Two-batch overlap: runs the thread's other micro-batches instead of blocking; false when there are none
// (comms/collectives/communicator.hpp).
bool run_other_micro_batches();
// Whether the calling thread's waits may spin and yield its core before they sleep (by default they do). Not under
// two-batch overlap (set_wait_hook turns it off for the hooked thread): its other micro-batches use the core.
void set_yielding(bool yielding);
bool yielding();

// Waits until ready() holds. ready() must become true only after signal(w). give_up() returns an Error to stop
// waiting (the peer died, the group was aborted); it is called before each sleep. Past the deadline returns
// on_timeout().
template <class Ready, class GiveUp, class OnTimeout>
Status wait_until(SyncWord& w, Ready&& ready, GiveUp&& give_up, Clock::time_point deadline, OnTimeout&& on_timeout) {
  if (ready()) return Status::success();
  const auto spin_end = Clock::now() + kSpinTime;
  // Two-batch overlap (not yielding): no spin, the other micro-batches compute meanwhile.
  for (unsigned i = 1; yielding(); ++i) {
    cpu_relax();
    if (ready()) return Status::success();
    if ((i & 15) == 0 && Clock::now() >= spin_end) break;
  }
  for (unsigned i = 1; run_other_micro_batches(); ++i) {
    if (ready()) return Status::success();
    if ((i & 63) == 0) {
      if (std::optional<Error> e = give_up()) return *e;
      if (Clock::now() >= deadline) return on_timeout();
    }
  }
  if (yielding()) {
    const auto yield_end = spin_end + kYieldTime;
    do {
      yield_core();
      if (ready()) return Status::success();
    } while (Clock::now() < yield_end);
  }
  for (;;) {
    if (std::optional<Error> e = give_up()) return *e;
    const auto now = Clock::now();
    if (now >= deadline) return on_timeout();
    w.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = w.value.load(std::memory_order_seq_cst);
    if (ready()) {
      w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return Status::success();
    }
    sleep_while(w, seen, std::min<Clock::duration>(deadline - now, kSleepSlice));
    w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready()) return Status::success();
  }
}

}  // namespace actord::coll
