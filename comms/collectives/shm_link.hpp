// A duplex message link between an engine and one worker process on the same machine, in shared memory: two
// single-producer single-consumer rings (engine -> worker, worker -> engine) and a heartbeat counter, in one
// segment. A message is a list of byte frames.
//
// Why: a step costs one message each way. Over ZeroMQ ipc each message wakes the I/O thread of both processes
// (four thread wake-ups per step besides the receivers'); here a send copies into the ring and makes a system call
// only when the receiver sleeps, and a worker whose next step is already queued (the scheduler sends ahead) never
// sleeps at all.
//
// Contract:
// - create() (the engine) makes the segment "/actord-coll-<pid>-link-<tag>" (so ShmSegment::remove_stale() removes
//   those of dead engines); open() (the worker) maps it, waiting up to a deadline for its creator. The worker
//   unlinks the name once it has mapped it: from then on the memory goes with the last mapping.
// - One thread at a time sends on an end and one thread at a time receives on it (they may be two threads).
// - send() writes the whole message, waiting while the ring is full (a message larger than the ring streams
//   through it); it gives up with an Error when give_up() returns one (the peer died) or at the deadline.
// - recv() returns the next message, or nullopt when none began within `wait`; once a message began it waits for
//   the rest (give_up() ends that wait). Messages arrive whole and in order.
// - beat() bumps the worker end's heartbeat counter (any thread, no system call); beats() reads it.
// Waiting spins for a few microseconds, then sleeps on a futex (no yield phase: the peer computes for a whole step,
// and a waiter that keeps its core would slow it).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comms/collectives/shm_segment.hpp"
#include "core/status.hpp"

namespace actord::coll {

class ShmLink {
 public:
  enum class End { engine, worker };
  using Clock = std::chrono::steady_clock;
  using GiveUp = std::function<std::optional<Error>()>;
  using Frames = std::vector<std::vector<uint8_t>>;  // bytes as wire_msg holds them: moved, not copied

  static constexpr size_t kDefaultRingBytes = size_t{1} << 20;

  // "/actord-coll-<pid>-link-<tag>", tag with '/' replaced: the name of engine `pid`'s link `tag`.
  static std::string segment_name(int pid, std::string_view tag);
  // Both ends must name the same ring size (open() of a segment of another size is an Error naming both).
  static Result<ShmLink> create(const std::string& name, size_t ring_bytes = kDefaultRingBytes);
  static Result<ShmLink> open(const std::string& name, Clock::time_point deadline,
                              size_t ring_bytes = kDefaultRingBytes);

  Status send(std::span<const std::span<const std::byte>> frames, Clock::time_point deadline, const GiveUp& give_up);
  Result<std::optional<Frames>> recv(std::chrono::nanoseconds wait, const GiveUp& give_up);

  void beat();
  uint64_t beats() const;

  struct Ring;  // one direction's counters (in the segment)
  const std::string& name() const { return seg_.name(); }
  void unlink() { seg_.unlink(); }

 private:
  ShmLink(ShmSegment seg, End end, size_t ring_bytes);
  Status put(const std::byte* p, size_t n, Clock::time_point deadline, const GiveUp& give_up);
  Status take(std::byte* p, size_t n, Clock::time_point deadline, const GiveUp& give_up);

  ShmSegment seg_;
  End end_;
  size_t ring_bytes_;
  Ring* out_;  // the ring this end writes
  Ring* in_;   // the ring this end reads
  std::byte* out_data_;
  std::byte* in_data_;
};

}  // namespace actord::coll
