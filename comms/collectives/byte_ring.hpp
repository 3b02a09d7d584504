// A single-producer single-consumer byte ring in shared memory: the counters (bytes written and read so far, each
// with the futex word its side signals) and the loops that stream bytes in and out of a buffer of `cap` bytes,
// wrapping at its end. Used by the shared memory communicator's send/recv channels and by the engine <-> worker
// link (shm_link).
//
// Contract: one writer and one reader. ring_put/ring_take move all n bytes, waiting through `wait(word, ready)`
// (a Status; the caller's way of bounding the wait and noticing a dead peer) whenever the ring is full / empty;
// the other side is signalled after every chunk. Counters start at zero (a zero-filled segment is a fresh ring).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "comms/collectives/futex_sync.hpp"
#include "core/status.hpp"

namespace actord::coll {

struct alignas(64) RingCounters {
  SyncWord written;  // signalled after head moved
  SyncWord read;     // signalled after tail moved
  alignas(64) std::atomic<uint64_t> head{0};  // bytes written so far (the writer's)
  alignas(64) std::atomic<uint64_t> tail{0};  // bytes read so far (the reader's)
};

// Copies n bytes into the ring at byte position pos (mod cap), wrapping.
inline void ring_copy_in(std::byte* ring, uint64_t cap, uint64_t pos, const std::byte* p, size_t n) {
  if (n == 0) return;  // p may be null then (an empty message)
  const size_t at = static_cast<size_t>(pos % cap);
  const size_t first = std::min(n, static_cast<size_t>(cap) - at);
  std::memcpy(ring + at, p, first);
  if (n > first) std::memcpy(ring, p + first, n - first);
}

inline void ring_copy_out(const std::byte* ring, uint64_t cap, uint64_t pos, std::byte* p, size_t n) {
  if (n == 0) return;
  const size_t at = static_cast<size_t>(pos % cap);
  const size_t first = std::min(n, static_cast<size_t>(cap) - at);
  std::memcpy(p, ring + at, first);
  if (n > first) std::memcpy(p + first, ring, n - first);
}

template <class Wait>
Status ring_put(RingCounters& r, std::byte* ring, uint64_t cap, const std::byte* p, size_t n, Wait&& wait) {
  uint64_t head = r.head.load(std::memory_order_relaxed);
  while (n > 0) {
    ACTORD_TRY_STATUS(wait(r.read, [&] { return head - r.tail.load(std::memory_order_acquire) < cap; }));
    const uint64_t room = cap - (head - r.tail.load(std::memory_order_acquire));
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(room, n));
    ring_copy_in(ring, cap, head, p, chunk);
    head += chunk;
    p += chunk;
    n -= chunk;
    r.head.store(head, std::memory_order_release);
    signal(r.written);
  }
  return Status::success();
}

template <class Wait>
Status ring_take(RingCounters& r, const std::byte* ring, uint64_t cap, std::byte* p, size_t n, Wait&& wait) {
  uint64_t tail = r.tail.load(std::memory_order_relaxed);
  while (n > 0) {
    ACTORD_TRY_STATUS(wait(r.written, [&] { return r.head.load(std::memory_order_acquire) != tail; }));
    const uint64_t avail = r.head.load(std::memory_order_acquire) - tail;
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(avail, n));
    ring_copy_out(ring, cap, tail, p, chunk);
    tail += chunk;
    p += chunk;
    n -= chunk;
    r.tail.store(tail, std::memory_order_release);
    signal(r.read);
  }
  return Status::success();
}

}  // namespace actord::coll
