// One rank's end of a collective group: all_reduce, all_gather, reduce_scatter, all_to_all, send/recv, barrier.
//
// Contract:
// - Collective calls (all but send/recv) are made by every rank of the group, in the same order, with matching
//   arguments; a rank that calls another operation or passes other sizes gets an Error, and so do its peers.
// - Results are deterministic: all_reduce and reduce_scatter add the ranks' contributions in rank order,
//   (((x0 + x1) + x2) + ...) in float, on every backend, so every rank gets bit-identical sums, equal to that
//   fixed-order sum, and a group run as threads gives the same bits as one run as processes.
// - Element counts need not divide by the group size. all_gather and reduce_scatter split by `counts` (counts[r]
//   elements are rank r's part, in rank order); without counts, by balanced_counts (the first total % size ranks
//   get one element more). all_reduce equals reduce_scatter followed by all_gather.
// - Waits are bounded: a peer that does not arrive within spec().timeout, or that died or left, makes the
//   operation return an Error naming the group, this rank and the peer (Errc::worker_failed); nothing aborts the
//   process. Any failure breaks the group: the peers are told (they fail too instead of waiting out the timeout),
//   and every later call returns an Error. A broken group is rebuilt as a new one (a new GroupSpec id).
// - send(peer) returns once the bytes are handed over (the caller may reuse its buffer); it may wait for the
//   peer's matching recv (the in-process backend always does; the others when their buffer towards the peer is
//   full), so two ranks must not both send to each other before receiving. recv(peer, out) takes exactly
//   out.size() elements: a message of another size is an Error. Messages between two ranks arrive in order.
// - With a link model (GroupSpec::link_latency, link_bytes_per_second) an operation returns latency + bytes /
//   bandwidth after the last rank arrived at it, as a real link delivers the last sender's bytes, and never before
//   the backend finished it. all_reduce counts what a ring moves per rank (2 (N-1)/N of the buffer), all_gather and
//   reduce_scatter the other ranks' parts, all_to_all what this rank sends to the others, recv its message (a send
//   returns at once: its receiver pays), barrier the latency alone. Where a backend cannot see when its peers
//   arrived (ZeroMQ, send/recv) the time counts from this rank's call.
// - A communicator is used by one thread at a time (its rank's); abort() may be called from any thread and makes
//   the call in progress, and every later one, return an Error. Destroying a communicator leaves the group (after
//   delivering what it still has queued for its peers: destroy it before the process exits); a peer still waiting
//   for it gets an Error at once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comms/collectives/group_spec.hpp"
#include "core/status.hpp"
#include "core/step_trace.hpp"

namespace actord::coll {

// Balanced split of `total` elements over `parts` ranks: the first total % parts ranks get one element more.
std::vector<size_t> balanced_counts(size_t total, int parts);
// Rank r's count in balanced_counts(total, parts), and the sum of the counts before it.
inline size_t balanced_count(size_t total, int parts, int r) {
  const size_t p = static_cast<size_t>(parts);
  return total / p + (static_cast<size_t>(r) < total % p ? 1 : 0);
}
inline size_t balanced_offset(size_t total, int parts, int r) {
  const size_t p = static_cast<size_t>(parts);
  const size_t rr = static_cast<size_t>(r);
  return rr * (total / p) + std::min(rr, total % p);
}

// Two-batch overlap: a rank's micro-batches run as fibers of one thread (actors/overlap_runner.hpp), switched only
// where an operation would wait for peers. The hook a thread sets is asked, by every wait loop of the communicators
// (and the link model's sleep), to run the other micro-batches instead of blocking: pause() returns true after they
// ran until they wait in turn (the caller re-checks its condition and may call again), false when there is none to
// run (the caller blocks as it would without a hook).
class WaitHook {
 public:
  virtual bool pause() = 0;

 protected:
  ~WaitHook() = default;
};
// The calling thread's hook (null: none), for every communicator it uses.
void set_wait_hook(WaitHook* hook);
// Called by the communicators' wait loops (and the link model's sleep) instead of blocking while the calling thread
// has a hook: its pause().
bool run_other_micro_batches();

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return spec_.size; }
  const GroupSpec& spec() const { return spec_; }
  virtual Backend backend() const = 0;

  // data: [n] on every rank, the same n; replaced by the element-wise sum over ranks.
  Status all_reduce(std::span<float> data);

  // in: [counts[rank]]; out: [sum(counts)], rank r's part at offset counts[0] + ... + counts[r-1].
  Status all_gather(std::span<const float> in, std::span<float> out, std::span<const size_t> counts);
  Status all_gather(std::span<const float> in, std::span<float> out);  // counts = balanced_counts(out.size())
  Status all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out, std::span<const size_t> counts);

  // in: [sum(counts)] on every rank; out: [counts[rank]], the sum over ranks of this rank's part of in.
  Status reduce_scatter(std::span<const float> in, std::span<float> out, std::span<const size_t> counts);
  Status reduce_scatter(std::span<const float> in, std::span<float> out);  // counts = balanced_counts(in.size())

  // in: the blocks for ranks 0 .. size-1 one after the other, send_counts[r] elements for rank r. Afterwards
  // recv_counts[r] is the number of elements rank r sent to this one, and out holds those blocks in rank order.
  // Each rank learns its receive counts from the operation itself; only the blocks' bytes travel.
  Status all_to_all(std::span<const float> in, std::span<const size_t> send_counts, std::vector<float>& out,
                    std::vector<size_t>& recv_counts);
  Status all_to_all_bytes(std::span<const std::byte> in, std::span<const size_t> send_counts,
                          std::vector<std::byte>& out, std::vector<size_t>& recv_counts);

  Status send(int peer, std::span<const float> data);
  Status send_bytes(int peer, std::span<const std::byte> data);
  Status recv(int peer, std::span<float> out);
  Status recv_bytes(int peer, std::span<std::byte> out);

  Status barrier();

  // Breaks the group from any thread (the coordinator tearing a group down while a rank waits in it).
  virtual void abort(const std::string& reason) = 0;

  // Where this rank's operations are recorded (each a span named after the operation, with its bytes), from its
  // thread; null: not traced.
  void set_trace(StepTrace* trace) { trace_ = trace; }

 protected:
  Communicator(GroupSpec spec, int rank) : spec_(std::move(spec)), rank_(rank) {}

  // Where a backend writes what all_to_all receives: given the byte count from each rank, a span of their sum.
  class Sink {
   public:
    virtual std::span<std::byte> place(std::span<const size_t> recv_bytes) = 0;

   protected:
    ~Sink() = default;
  };
  // sink.place(recv_bytes), or an Error when the span it gives is not their sum (a float all_to_all that received
  // a byte count that is not a whole number of floats).
  static Result<std::span<std::byte>> place(Sink& sink, std::span<const size_t> recv_bytes);

  // The operations of a backend; arguments have been checked against this rank's own view (sizes add up, peers
  // exist). Errors carry only what went wrong ("rank 2 did not arrive within 1000 ms"): the caller prefixes the
  // group, rank and operation.
  virtual Status do_all_reduce(std::span<float> data) = 0;
  virtual Status do_all_gather(std::span<const std::byte> in, std::span<std::byte> out,
                               std::span<const size_t> byte_counts) = 0;
  virtual Status do_reduce_scatter(std::span<const float> in, std::span<float> out, std::span<const size_t> counts) = 0;
  virtual Status do_all_to_all(std::span<const std::byte> in, std::span<const size_t> send_bytes, Sink& sink) = 0;
  virtual Status do_send(int peer, std::span<const std::byte> data) = 0;
  virtual Status do_recv(int peer, std::span<std::byte> out) = 0;
  virtual Status do_barrier() = 0;
  // Called on the rank's thread when an operation failed, before the error is returned: tells the peers
  // (abort() by default).
  virtual void on_failure(const std::string& reason) { abort(reason); }
  // A backend that sees when each rank arrived at the operation in progress (StepTrace::now_ns of its post) reports
  // the latest here: the link model counts from it.
  void note_arrival(uint64_t ns) { arrived_ns_ = std::max(arrived_ns_, ns); }

 private:
  // Runs the backend's operation `body` (errors prefixed, the group broken on failure); with a link model, then
  // waits until moving `link_bytes` over the modelled link would have taken since the last rank arrived (or since
  // the operation started).
  template <class F>
  Status run(std::string_view op, F&& body, std::optional<size_t> link_bytes = std::nullopt);
  void emulate_link(size_t bytes, uint64_t start_ns) const;
  Status refuse(std::string_view op, const std::string& why);

  GroupSpec spec_;
  int rank_;
  StepTrace* trace_ = nullptr;
  bool broken_ = false;
  Error failure_;  // the first failure, once broken_
  uint64_t arrived_ns_ = 0;  // note_arrival's latest, for the operation in progress
};

// The one summation order of every backend: dst[i] = (((src[0][i] + src[1][i]) + src[2][i]) + ...), in float.
// src[j] points at `count` floats, not necessarily aligned (a received ZeroMQ frame); dst may be one of the
// sources: each element is read from every source before it is written.
void sum_in_rank_order(const void* const* src, int n_src, float* dst, size_t count);

}  // namespace actord::coll
