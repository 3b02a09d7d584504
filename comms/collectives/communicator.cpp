#include "comms/collectives/communicator.hpp"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "comms/collectives/futex_sync.hpp"

namespace actord::coll {
namespace {

size_t sum(std::span<const size_t> counts) { return std::accumulate(counts.begin(), counts.end(), size_t{0}); }

std::vector<size_t> times(std::span<const size_t> counts, size_t factor) {
  std::vector<size_t> out(counts.begin(), counts.end());
  for (size_t& c : out) c *= factor;
  return out;
}

template <class T>
std::span<const std::byte> bytes_of(std::span<T> s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size_bytes()};
}
template <class T>
std::span<std::byte> writable_bytes_of(std::span<T> s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size_bytes()};
}

}  // namespace

std::vector<size_t> balanced_counts(size_t total, int parts) {
  std::vector<size_t> counts(static_cast<size_t>(std::max(parts, 1)), total / static_cast<size_t>(std::max(parts, 1)));
  for (size_t r = 0; r < total % counts.size(); ++r) ++counts[r];
  return counts;
}

void sum_in_rank_order(const void* const* src, int n_src, float* dst, size_t count) {
  bool aligned = true;
  for (int j = 0; j < n_src; ++j) aligned = aligned && reinterpret_cast<uintptr_t>(src[j]) % alignof(float) == 0;
  // Blocks small enough for L1; each element's sum is complete before it is stored, so dst may alias a source.
  constexpr size_t kBlock = 512;
  alignas(64) float acc[kBlock];
  alignas(64) float part[kBlock];
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t m = std::min(kBlock, count - b);
    std::memcpy(acc, static_cast<const std::byte*>(src[0]) + b * sizeof(float), m * sizeof(float));
    for (int j = 1; j < n_src; ++j) {
      const float* s;
      if (aligned) {
        s = static_cast<const float*>(src[j]) + b;
      } else {  // a received frame at any address: copied first
        std::memcpy(part, static_cast<const std::byte*>(src[j]) + b * sizeof(float), m * sizeof(float));
        s = part;
      }
      for (size_t i = 0; i < m; ++i) acc[i] += s[i];
    }
    std::memcpy(dst + b, acc, m * sizeof(float));
  }
}

Result<std::span<std::byte>> Communicator::place(Sink& sink, std::span<const size_t> recv_bytes) {
  const size_t total = sum(recv_bytes);
  std::span<std::byte> out = sink.place(recv_bytes);
  if (out.size() != total) {
    return make_error(Errc::invalid_argument, "received " + std::to_string(total) +
                                                  " bytes in all, not a whole number of elements (a peer called "
                                                  "the byte variant where this rank called the float one?)");
  }
  return out;
}

namespace {
thread_local WaitHook* wait_hook = nullptr;
}  // namespace

bool run_other_micro_batches() { return wait_hook != nullptr && wait_hook->pause(); }

void set_wait_hook(WaitHook* hook) {
  wait_hook = hook;
  set_yielding(hook == nullptr);  // the core is the other micro-batches' while this one waits
}

template <class F>
Status Communicator::run(std::string_view op, F&& body, std::optional<size_t> link_bytes) {
  auto where = [&] {
    return describe(spec_) + ", rank " + std::to_string(rank_) + " of " + std::to_string(spec_.size) + ", " +
           std::string(op) + ": ";
  };
  if (broken_) return make_error(failure_.code, where() + "the group is broken: " + failure_.message);
  const bool modelled = link_bytes && (spec_.link_latency.count() > 0 || spec_.link_bytes_per_second > 0);
  const uint64_t start = trace_ || modelled ? StepTrace::now_ns() : 0;
  arrived_ns_ = 0;
  Status st = body();
  if (st.ok() && modelled) emulate_link(*link_bytes, std::max(start, arrived_ns_));
  // Operation names are the literals of the callers below.
  if (st.ok() && trace_) trace_->add(op.data(), "comm", start, StepTrace::now_ns(), link_bytes.value_or(0));
  if (st.ok()) return st;
  broken_ = true;
  failure_ = st.error();
  on_failure(std::string(op) + ": " + st.error().message);
  return make_error(st.error().code, where() + st.error().message);
}

// Waits until the modelled link's time after `start_ns`: runs the thread's other micro-batches meanwhile, or sleeps
// (the core is free for other work); the calling thread's timer slack is made 1 ns once, so that a 200 us latency
// is not stretched by the default 50 us slack.
void Communicator::emulate_link(size_t bytes, uint64_t start_ns) const {
  thread_local bool precise = false;
  if (!precise) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    precise = true;
  }
  int64_t ns = spec_.link_latency.count();
  if (spec_.link_bytes_per_second > 0)
    ns += static_cast<int64_t>(static_cast<double>(bytes) * 1e9 / static_cast<double>(spec_.link_bytes_per_second));
  const uint64_t end_ns = start_ns + static_cast<uint64_t>(std::max<int64_t>(ns, 0));
  while (StepTrace::now_ns() < end_ns) {
    if (run_other_micro_batches()) continue;
    timespec until{};
    until.tv_sec = static_cast<time_t>(end_ns / 1000000000);
    until.tv_nsec = static_cast<long>(end_ns % 1000000000);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
    }
  }
}

Status Communicator::refuse(std::string_view op, const std::string& why) {
  return run(op, [&]() -> Status { return make_error(Errc::invalid_argument, why); });
}

Status Communicator::all_reduce(std::span<float> data) {
  const size_t n = static_cast<size_t>(size());
  return run("all_reduce", [&] { return do_all_reduce(data); }, 2 * (n - 1) * data.size_bytes() / n);
}

// Checks a partition's counts against the buffers (in elements): why they do not fit, or "".
static std::string partition_problem(std::span<const size_t> counts, int size, int rank, size_t whole,
                                     const char* whole_name, size_t part, const char* part_name) {
  if (counts.size() != static_cast<size_t>(size)) {
    return std::to_string(counts.size()) + " counts for " + std::to_string(size) + " ranks";
  }
  if (sum(counts) != whole) {
    return "counts add up to " + std::to_string(sum(counts)) + ", " + whole_name + " holds " + std::to_string(whole);
  }
  if (part != counts[static_cast<size_t>(rank)]) {
    return std::string(part_name) + " holds " + std::to_string(part) + ", this rank's count is " +
           std::to_string(counts[static_cast<size_t>(rank)]);
  }
  return {};
}

// Checks all_to_all's send counts against its input (in elements): why they do not fit, or "".
static std::string send_counts_problem(std::span<const size_t> send_counts, int size, size_t in_size) {
  if (send_counts.size() != static_cast<size_t>(size)) {
    return std::to_string(send_counts.size()) + " send counts for " + std::to_string(size) + " ranks";
  }
  if (sum(send_counts) != in_size) {
    return "send counts add up to " + std::to_string(sum(send_counts)) + ", in holds " + std::to_string(in_size);
  }
  return {};
}

Status Communicator::all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out,
                                      std::span<const size_t> counts) {
  if (auto why = partition_problem(counts, size(), rank(), out.size(), "out", in.size(), "in"); !why.empty()) {
    return refuse("all_gather", why);
  }
  return run("all_gather", [&] { return do_all_gather(in, out, counts); }, out.size() - in.size());
}

Status Communicator::all_gather(std::span<const float> in, std::span<float> out, std::span<const size_t> counts) {
  if (auto why = partition_problem(counts, size(), rank(), out.size(), "out", in.size(), "in"); !why.empty()) {
    return refuse("all_gather", why);
  }
  const std::vector<size_t> bytes = times(counts, sizeof(float));
  return run("all_gather", [&] { return do_all_gather(bytes_of(in), writable_bytes_of(out), bytes); },
             out.size_bytes() - in.size_bytes());
}

Status Communicator::all_gather(std::span<const float> in, std::span<float> out) {
  return all_gather(in, out, balanced_counts(out.size(), size()));
}

Status Communicator::reduce_scatter(std::span<const float> in, std::span<float> out, std::span<const size_t> counts) {
  if (auto why = partition_problem(counts, size(), rank(), in.size(), "in", out.size(), "out"); !why.empty()) {
    return refuse("reduce_scatter", why);
  }
  return run("reduce_scatter", [&] { return do_reduce_scatter(in, out, counts); },
             in.size_bytes() - out.size_bytes());
}

Status Communicator::reduce_scatter(std::span<const float> in, std::span<float> out) {
  return reduce_scatter(in, out, balanced_counts(in.size(), size()));
}

Status Communicator::all_to_all_bytes(std::span<const std::byte> in, std::span<const size_t> send_counts,
                                      std::vector<std::byte>& out, std::vector<size_t>& recv_counts) {
  if (auto why = send_counts_problem(send_counts, size(), in.size()); !why.empty()) return refuse("all_to_all", why);
  struct VectorSink final : Sink {
    std::vector<std::byte>& out;
    std::vector<size_t>& counts;
    VectorSink(std::vector<std::byte>& o, std::vector<size_t>& c) : out(o), counts(c) {}
    std::span<std::byte> place(std::span<const size_t> recv_bytes) override {
      counts.assign(recv_bytes.begin(), recv_bytes.end());
      out.resize(sum(recv_bytes));
      return out;
    }
  } sink(out, recv_counts);
  return run("all_to_all", [&] { return do_all_to_all(in, send_counts, sink); },
             in.size() - send_counts[static_cast<size_t>(rank())]);
}

Status Communicator::all_to_all(std::span<const float> in, std::span<const size_t> send_counts, std::vector<float>& out,
                                std::vector<size_t>& recv_counts) {
  if (auto why = send_counts_problem(send_counts, size(), in.size()); !why.empty()) return refuse("all_to_all", why);
  struct FloatSink final : Sink {
    std::vector<float>& out;
    std::vector<size_t>& counts;
    FloatSink(std::vector<float>& o, std::vector<size_t>& c) : out(o), counts(c) {}
    std::span<std::byte> place(std::span<const size_t> recv_bytes) override {
      counts.resize(recv_bytes.size());
      for (size_t r = 0; r < recv_bytes.size(); ++r) {
        if (recv_bytes[r] % sizeof(float) != 0) return {};
        counts[r] = recv_bytes[r] / sizeof(float);
      }
      out.resize(sum(counts));
      return writable_bytes_of(std::span<float>(out));
    }
  } sink(out, recv_counts);
  const std::vector<size_t> send_bytes = times(send_counts, sizeof(float));
  return run("all_to_all", [&] { return do_all_to_all(bytes_of(in), send_bytes, sink); },
             (in.size() - send_counts[static_cast<size_t>(rank())]) * sizeof(float));
}

Status Communicator::send_bytes(int peer, std::span<const std::byte> data) {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return refuse("send", "no peer rank " + std::to_string(peer) + " to send to");
  }
  return run("send", [&] { return do_send(peer, data); });
}

Status Communicator::send(int peer, std::span<const float> data) { return send_bytes(peer, bytes_of(data)); }

Status Communicator::recv_bytes(int peer, std::span<std::byte> out) {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return refuse("recv", "no peer rank " + std::to_string(peer) + " to receive from");
  }
  return run("recv", [&] { return do_recv(peer, out); }, out.size());
}

Status Communicator::recv(int peer, std::span<float> out) { return recv_bytes(peer, writable_bytes_of(out)); }

Status Communicator::barrier() {
  return run("barrier", [&] { return do_barrier(); }, size_t{0});
}

}  // namespace actord::coll
