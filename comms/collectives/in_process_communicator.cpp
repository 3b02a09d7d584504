#include "comms/collectives/in_process_communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "comms/collectives/op_kind.hpp"
#include "comms/collectives/phase_board.hpp"

namespace actord::coll {
namespace {

// What a rank is doing, for its peers to read between its arrival and its departure.
struct Desc {
  OpKind kind = OpKind::none;
  size_t total = 0;  // elements (all_reduce, reduce_scatter) or bytes (all_gather, all_to_all)
  const std::byte* in = nullptr;
  float* inout = nullptr;          // all_reduce: the rank's buffer, [total]
  const size_t* counts = nullptr;  // [size]: the partition (all_gather, reduce_scatter) or send counts (all_to_all)
  uint64_t posted_ns = 0;          // when the rank arrived (StepTrace::now_ns), for the link model
};

struct alignas(64) DescPair {
  Desc by_parity[2];
};

// A pointer handed from one rank to another: posted by the sender, taken by the receiver once copied.
struct alignas(64) Mailbox {
  SyncWord posted;
  SyncWord taken;
  const std::byte* data = nullptr;
  size_t bytes = 0;
};

struct Hub {
  explicit Hub(int size)
      : ranks(static_cast<size_t>(size)),
        descs(static_cast<size_t>(size)),
        mail(static_cast<size_t>(size) * static_cast<size_t>(size)) {}
  AbortState abort;
  std::vector<RankState> ranks;
  std::vector<DescPair> descs;
  std::vector<Mailbox> mail;  // [src * size + dst]
};

// [begin, end) of `rank`'s share of n elements when the work is split in whole cache lines.
std::pair<size_t, size_t> line_share(size_t n, int size, int rank) {
  constexpr size_t kLine = 16;
  const size_t lines = (n + kLine - 1) / kLine;
  const size_t begin = balanced_offset(lines, size, rank);
  const size_t end = begin + balanced_count(lines, size, rank);
  return {std::min(n, begin * kLine), std::min(n, end * kLine)};
}

size_t prefix(const size_t* counts, int upto) {
  size_t s = 0;
  for (int i = 0; i < upto; ++i) s += counts[i];
  return s;
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(GroupSpec spec, int rank, std::shared_ptr<Hub> hub)
      : Communicator(std::move(spec), rank),
        hub_(std::move(hub)),
        board_(&hub_->abort, hub_->ranks.data(), size(), rank, this->spec().timeout),
        sent_(static_cast<size_t>(size()), 0),
        received_(static_cast<size_t>(size()), 0) {}
  ~InProcessCommunicator() override { board_.leave(); }

  Backend backend() const override { return Backend::in_process; }
  void abort(const std::string& reason) override { board_.abort(reason); }

 protected:
  Status do_all_reduce(std::span<float> data) override {
    Status st = arrive({OpKind::all_reduce, data.size(), nullptr, data.data(), nullptr});
    if (st.ok()) {
      // This rank adds up its share of every rank's buffer and writes the sum into all of them.
      const auto [begin, end] = line_share(data.size(), size(), rank());
      constexpr size_t kBlock = 1024;
      alignas(64) float acc[kBlock];
      for (size_t b = begin; b < end; b += kBlock) {
        const size_t m = std::min(kBlock, end - b);
        for (int r = 0; r < size(); ++r) src_[static_cast<size_t>(r)] = peer(r).inout + b;
        sum_in_rank_order(src_.data(), size(), acc, m);
        for (int r = 0; r < size(); ++r) std::memcpy(peer(r).inout + b, acc, m * sizeof(float));
      }
    }
    return depart(std::move(st));
  }

  Status do_all_gather(std::span<const std::byte> in, std::span<std::byte> out,
                       std::span<const size_t> counts) override {
    Status st = arrive({OpKind::all_gather, out.size(), in.data(), nullptr, counts.data()});
    if (st.ok()) st = same_counts(counts, "counts");
    if (st.ok()) {
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t n = counts[static_cast<size_t>(r)];
        if (n > 0) std::memcpy(out.data() + offset, peer(r).in, n);
        offset += n;
      }
    }
    return depart(std::move(st));
  }

  Status do_reduce_scatter(std::span<const float> in, std::span<float> out, std::span<const size_t> counts) override {
    Status st = arrive(
        {OpKind::reduce_scatter, in.size(), reinterpret_cast<const std::byte*>(in.data()), nullptr, counts.data()});
    if (st.ok()) st = same_counts(counts, "counts");
    if (st.ok()) {
      const size_t offset = prefix(counts.data(), rank());
      for (int r = 0; r < size(); ++r) {
        src_[static_cast<size_t>(r)] = reinterpret_cast<const float*>(peer(r).in) + offset;
      }
      sum_in_rank_order(src_.data(), size(), out.data(), out.size());
    }
    return depart(std::move(st));
  }

  Status do_all_to_all(std::span<const std::byte> in, std::span<const size_t> send_bytes, Sink& sink) override {
    Status st = arrive({OpKind::all_to_all, 0, in.data(), nullptr, send_bytes.data()});  // totals differ by rank
    if (st.ok()) {
      std::vector<size_t> recv(static_cast<size_t>(size()));
      for (int r = 0; r < size(); ++r) recv[static_cast<size_t>(r)] = peer(r).counts[rank()];
      Result<std::span<std::byte>> out = place(sink, recv);
      if (!out.ok()) {
        st = out.error();
      } else {
        size_t at = 0;
        for (int r = 0; r < size(); ++r) {
          const size_t n = recv[static_cast<size_t>(r)];
          if (n > 0) std::memcpy(out->data() + at, peer(r).in + prefix(peer(r).counts, rank()), n);
          at += n;
        }
      }
    }
    return depart(std::move(st));
  }

  Status do_barrier() override {
    Status st = arrive({OpKind::barrier, 0, nullptr, nullptr, nullptr});
    ++uses_;
    return st;
  }

  Status do_send(int to, std::span<const std::byte> data) override {
    Mailbox& m = hub_->mail[static_cast<size_t>(rank() * size() + to)];
    m.data = data.data();
    m.bytes = data.size();
    signal(m.posted);
    const uint32_t seq = ++sent_[static_cast<size_t>(to)];
    return wait_until(
        m.taken, [&] { return counter_distance(m.taken.value.load(std::memory_order_acquire), seq) >= 0; },
        [&] { return board_.failure(to); }, board_.deadline(),
        [&] { return board_.timeout_error(to, "did not receive"); });
  }

  Status do_recv(int from, std::span<std::byte> out) override {
    Mailbox& m = hub_->mail[static_cast<size_t>(from * size() + rank())];
    const uint32_t seq = ++received_[static_cast<size_t>(from)];
    ACTORD_TRY_STATUS(wait_until(
        m.posted, [&] { return counter_distance(m.posted.value.load(std::memory_order_acquire), seq) >= 0; },
        [&] { return board_.failure(from); }, board_.deadline(),
        [&] { return board_.timeout_error(from, "sent nothing"); }));
    if (m.bytes != out.size()) {
      return make_error(Errc::invalid_argument, "rank " + std::to_string(from) + " sent " + std::to_string(m.bytes) +
                                                    " bytes, this rank receives " + std::to_string(out.size()));
    }
    if (!out.empty()) std::memcpy(out.data(), m.data, out.size());
    signal(m.taken);
    return Status::success();
  }

 private:
  const Desc& peer(int r) const { return hub_->descs[static_cast<size_t>(r)].by_parity[uses_ & 1]; }

  // Publishes what this rank does, waits for every peer to do the same, checks they do the same operation, and
  // notes when the last one arrived.
  Status arrive(const Desc& d) {
    Desc& mine = hub_->descs[static_cast<size_t>(rank())].by_parity[uses_ & 1];
    mine = d;
    mine.posted_ns = StepTrace::now_ns();
    board_.publish();
    arrived_ = false;
    ACTORD_TRY_STATUS(board_.wait_all());
    arrived_ = true;
    for (int r = 0; r < size(); ++r) {
      const Desc& p = peer(r);
      note_arrival(p.posted_ns);
      if (p.kind != d.kind || p.total != d.total) {
        return make_error(Errc::invalid_argument, "rank " + std::to_string(r) + " called " +
                                                      describe_op(p.kind, p.total) + " where this rank called " +
                                                      describe_op(d.kind, d.total));
      }
    }
    return Status::success();
  }

  Status same_counts(std::span<const size_t> counts, const char* what) const {
    for (int r = 0; r < size(); ++r) {
      if (!std::equal(counts.begin(), counts.end(), peer(r).counts)) {
        return make_error(Errc::invalid_argument,
                          "rank " + std::to_string(r) + " split the data by other " + what + " than this rank");
      }
    }
    return Status::success();
  }

  // The second phase: once every rank departed, none reads another's buffers any more. Taken even after a failed
  // check, so that no peer can still be reading this rank's buffer when the caller gets the error. Not after a
  // failed arrival: then some rank never arrived, so no peer got past the arrival to read anything.
  Status depart(Status st) {
    if (!arrived_) {
      ++uses_;
      return st;
    }
    board_.publish();
    Status done = board_.wait_all();
    ++uses_;
    if (!st.ok()) return st;
    return done;
  }

  std::shared_ptr<Hub> hub_;
  PhaseBoard board_;
  uint32_t uses_ = 0;
  bool arrived_ = false;  // the last arrive() saw every peer arrive
  std::vector<uint32_t> sent_;
  std::vector<uint32_t> received_;
  std::vector<const void*> src_ = std::vector<const void*>(static_cast<size_t>(size()));  // [size] scratch
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> create_in_process_group(const GroupSpec& spec) {
  ACTORD_TRY_STATUS(validate(spec));
  if (resolve_backend(spec) != Backend::in_process) {
    return make_error(Errc::invalid_argument,
                      describe(spec) + ": backend is " + backend_name(resolve_backend(spec)) + ", not in_process");
  }
  auto hub = std::make_shared<Hub>(spec.size);
  const int32_t pid = static_cast<int32_t>(getpid());
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < spec.size; ++r) {
    hub->ranks[static_cast<size_t>(r)].pid.store(pid);
    hub->ranks[static_cast<size_t>(r)].joined.store(1);
    comms.push_back(std::make_unique<InProcessCommunicator>(spec, r, hub));
  }
  return comms;
}

}  // namespace actord::coll
