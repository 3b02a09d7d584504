#include "comms/collectives/shm_communicator.hpp"

#include "comms/collectives/byte_ring.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>

#include "comms/collectives/op_kind.hpp"
#include "comms/collectives/phase_board.hpp"
#include "comms/collectives/shm_segment.hpp"

namespace actord::coll {
namespace {

constexpr uint64_t kMagic = 0x6c6c6f632d647261ULL;  // "ard-coll"
constexpr uint32_t kVersion = 2;
// all_reduce buffers up to this size take the one-phase form (all_reduce_one_phase).
constexpr size_t kOnePhaseBytes = size_t{256} << 10;

struct SegmentHeader {
  uint64_t magic = 0;
  uint32_t version = 0;
  int32_t size = 0;
  uint64_t id = 0;
  uint64_t slot_bytes = 0;
  uint64_t channel_bytes = 0;
  std::atomic<uint32_t> ready{0};     // 1 once rank 0 has laid the segment out
  std::atomic<uint32_t> attached{0};  // ranks that joined
};

// What a rank is doing, for its peers to check they do the same.
struct alignas(64) Desc {
  OpKind kind = OpKind::none;
  uint32_t piece = 0;
  uint64_t total = 0;
  uint64_t posted_ns = 0;  // when the rank arrived (StepTrace::now_ns), for the link model
};

struct alignas(64) DescPair {
  Desc by_parity[2];
};

// A byte stream from one rank to another: the sender owns head, the receiver tail.
using Channel = RingCounters;

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Where each part of the segment of a group of `size` ranks lies.
struct Layout {
  size_t abort, ranks, descs, counts, channels, slots, rings, total;
  Layout(int size, size_t slot_bytes, size_t channel_bytes) {
    const size_t n = static_cast<size_t>(size);
    abort = align_up(sizeof(SegmentHeader), 64);
    ranks = align_up(abort + sizeof(AbortState), 64);
    descs = align_up(ranks + n * sizeof(RankState), 64);
    counts = align_up(descs + n * sizeof(DescPair), 64);             // uint64 [size][2][size]
    channels = align_up(counts + n * 2 * n * sizeof(uint64_t), 64);  // Channel [size * size]
    slots = align_up(channels + n * n * sizeof(Channel), 4096);      // [2][size] x slot_bytes
    rings = align_up(slots + 2 * n * slot_bytes, 4096);              // [size * size] x channel_bytes
    total = align_up(rings + n * n * channel_bytes, 4096);
  }
};

size_t piece_len(size_t count, size_t piece, size_t per_piece) {
  const size_t start = piece * per_piece;
  return count > start ? std::min(per_piece, count - start) : 0;
}

size_t pieces_for(size_t largest, size_t per_piece) {
  return std::max<size_t>(1, (largest + per_piece - 1) / per_piece);
}

std::vector<size_t> offsets_of(std::span<const size_t> counts) {
  std::vector<size_t> offs(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offs[i + 1] = offs[i] + counts[i];
  return offs;
}

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(GroupSpec spec, int rank, ShmSegment segment)
      : Communicator(std::move(spec), rank),
        seg_(std::move(segment)),
        layout_(size(), this->spec().slot_bytes, this->spec().channel_bytes),
        board_(at<AbortState>(layout_.abort), at<RankState>(layout_.ranks), size(), rank, this->spec().timeout) {
    // Floats per rank per piece of all_reduce / reduce_scatter: whole cache lines.
    owner_floats_ = this->spec().slot_bytes / sizeof(float) / static_cast<size_t>(size()) / 16 * 16;
  }
  ~ShmCommunicator() override {
    board_.leave();
    seg_.unlink();  // only matters when the group never completed its join
  }

  Backend backend() const override { return Backend::shared_memory; }
  void abort(const std::string& reason) override { board_.abort(reason); }

  // Marks this rank joined, waits for the others; the last one to arrive unlinks the segment's name.
  Status join() {
    RankState& me = board_.rank_state(rank());
    me.pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
    me.joined.store(1, std::memory_order_release);
    header().attached.fetch_add(1, std::memory_order_acq_rel);
    const auto deadline = Clock::now() + spec().timeout;
    while (header().attached.load(std::memory_order_acquire) < static_cast<uint32_t>(size())) {
      if (auto e = board_.aborted()) return *e;
      if (Clock::now() >= deadline) {
        std::string missing;
        for (int r = 0; r < size(); ++r) {
          if (board_.rank_state(r).joined.load() == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        seg_.unlink();
        return make_error(Errc::worker_failed, "rank(s) " + missing + " did not join within " +
                                                   std::to_string(spec().timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    seg_.unlink();
    board_.watch_peers();
    return Status::success();
  }

 protected:
  Status do_all_reduce(std::span<float> data) override {
    if (data.size_bytes() <= std::min(kOnePhaseBytes, spec().slot_bytes)) return all_reduce_one_phase(data);
    // Each piece: every rank stages its share for each other owner; each owner adds up its share of all slots
    // (its own from its buffer, in rank order) into its slot and its buffer; then every rank copies the other
    // owners' sums out.
    const size_t total = data.size();
    const size_t q = owner_floats_;
    const size_t pieces = pieces_for(balanced_count(total, size(), 0), q);
    const size_t me = static_cast<size_t>(rank());
    for (size_t k = 0; k < pieces; ++k) {
      float* mine = slot_floats(rank());
      for (int c = 0; c < size(); ++c) {
        const size_t n = piece_len(balanced_count(total, size(), c), k, q);
        if (c != rank() && n > 0) {
          std::memcpy(mine + static_cast<size_t>(c) * q, data.data() + balanced_offset(total, size(), c) + k * q,
                      n * sizeof(float));
        }
      }
      ACTORD_TRY_STATUS(arrive({OpKind::all_reduce, static_cast<uint32_t>(k), total}, nullptr));
      const size_t own = piece_len(balanced_count(total, size(), rank()), k, q);
      float* own_data = data.data() + balanced_offset(total, size(), rank()) + k * q;
      for (int j = 0; j < size(); ++j) src_[static_cast<size_t>(j)] = slot_floats(j) + me * q;
      src_[me] = own_data;
      sum_in_rank_order(src_.data(), size(), mine + me * q, own);
      board_.publish();
      if (own > 0) std::memcpy(own_data, mine + me * q, own * sizeof(float));
      ACTORD_TRY_STATUS(board_.wait_all());
      for (int c = 0; c < size(); ++c) {
        const size_t n = piece_len(balanced_count(total, size(), c), k, q);
        if (c != rank() && n > 0) {
          std::memcpy(data.data() + balanced_offset(total, size(), c) + k * q,
                      slot_floats(c) + static_cast<size_t>(c) * q, n * sizeof(float));
        }
      }
      ++uses_;
    }
    return Status::success();
  }

  // A buffer that fits a slot: every rank stages all of it in its slot and, once all have, adds up every slot in rank
  // order (its own part from its buffer). Nothing is asked of a rank after it posted, so a peer whose core is busy with
  // another micro-batch's compute (two-batch overlap) holds no one up; the two-phase form above has each owner sum
  // its share for the others, which waits for the owner's thread to be scheduled. Each rank reads every slot, so
  // it is used up to kOnePhaseBytes (as fast as the two-phase form there at two ranks; at 1 MB 1.4x slower).
  Status all_reduce_one_phase(std::span<float> data) {
    if (!data.empty()) std::memcpy(slot_floats(rank()), data.data(), data.size_bytes());
    ACTORD_TRY_STATUS(arrive({OpKind::all_reduce, 0, data.size()}, nullptr));
    for (int j = 0; j < size(); ++j) src_[static_cast<size_t>(j)] = slot_floats(j);
    src_[static_cast<size_t>(rank())] = data.data();
    sum_in_rank_order(src_.data(), size(), data.data(), data.size());
    ++uses_;
    return Status::success();
  }

  Status do_all_gather(std::span<const std::byte> in, std::span<std::byte> out,
                       std::span<const size_t> counts) override {
    const std::vector<size_t> offs = offsets_of(counts);
    const size_t q = spec().slot_bytes;
    const size_t pieces = pieces_for(*std::max_element(counts.begin(), counts.end()), q);
    for (size_t k = 0; k < pieces; ++k) {
      const size_t own = piece_len(in.size(), k, q);
      if (own > 0) std::memcpy(slot(rank()), in.data() + k * q, own);
      ACTORD_TRY_STATUS(arrive({OpKind::all_gather, static_cast<uint32_t>(k), out.size()}, &counts));
      for (int j = 0; j < size(); ++j) {
        const size_t n = piece_len(counts[static_cast<size_t>(j)], k, q);
        if (n > 0) std::memcpy(out.data() + offs[static_cast<size_t>(j)] + k * q, slot(j), n);
      }
      ++uses_;
    }
    return Status::success();
  }

  Status do_reduce_scatter(std::span<const float> in, std::span<float> out, std::span<const size_t> counts) override {
    const std::vector<size_t> offs = offsets_of(counts);
    const size_t q = owner_floats_;
    const size_t pieces = pieces_for(*std::max_element(counts.begin(), counts.end()), q);
    for (size_t k = 0; k < pieces; ++k) {
      float* mine = slot_floats(rank());
      for (int c = 0; c < size(); ++c) {
        const size_t n = piece_len(counts[static_cast<size_t>(c)], k, q);
        if (c != rank() && n > 0) {
          std::memcpy(mine + c * q, in.data() + offs[static_cast<size_t>(c)] + k * q, n * sizeof(float));
        }
      }
      ACTORD_TRY_STATUS(arrive({OpKind::reduce_scatter, static_cast<uint32_t>(k), in.size()}, &counts));
      for (int j = 0; j < size(); ++j) src_[static_cast<size_t>(j)] = slot_floats(j) + rank() * q;
      src_[static_cast<size_t>(rank())] = in.data() + offs[static_cast<size_t>(rank())] + k * q;  // its own part
      sum_in_rank_order(src_.data(), size(), out.data() + k * q, piece_len(out.size(), k, q));
      ++uses_;
    }
    return Status::success();
  }

  Status do_all_to_all(std::span<const std::byte> in, std::span<const size_t> send_bytes, Sink& sink) override {
    // First the counts, through the counts table; then only the blocks' bytes, in pieces of a slot.
    const size_t n = static_cast<size_t>(size());
    const size_t r = static_cast<size_t>(rank());
    ACTORD_TRY_STATUS(arrive({OpKind::all_to_all, 0, 0}, &send_bytes));
    std::vector<size_t> recv(n), src_off(n), totals(n);
    for (size_t j = 0; j < n; ++j) {
      const uint64_t* row = counts_row(static_cast<int>(j));
      for (size_t k = 0; k < n; ++k) {
        if (k < r) src_off[j] += row[k];
        totals[j] += row[k];
      }
      recv[j] = row[r];
    }
    ++uses_;
    Result<std::span<std::byte>> out = place(sink, recv);
    if (!out.ok()) return out.error();
    const std::vector<size_t> dst_off = offsets_of(recv);
    const size_t q = spec().slot_bytes;
    const size_t largest = *std::max_element(totals.begin(), totals.end());
    const size_t pieces = largest == 0 ? 0 : pieces_for(largest, q);
    for (size_t k = 0; k < pieces; ++k) {
      const size_t own = piece_len(in.size(), k, q);
      if (own > 0) std::memcpy(slot(rank()), in.data() + k * q, own);
      ACTORD_TRY_STATUS(arrive({OpKind::all_to_all, static_cast<uint32_t>(k + 1), 0}, nullptr));
      const size_t lo_piece = k * q;
      const size_t hi_piece = lo_piece + q;
      for (size_t j = 0; j < n; ++j) {
        const size_t lo = std::max(src_off[j], lo_piece);
        const size_t hi = std::min(src_off[j] + recv[j], hi_piece);
        if (lo < hi)
          std::memcpy(out->data() + dst_off[j] + (lo - src_off[j]), slot(static_cast<int>(j)) + (lo - lo_piece),
                      hi - lo);
      }
      ++uses_;
    }
    return Status::success();
  }

  Status do_barrier() override {
    Status st = arrive({OpKind::barrier, 0, 0}, nullptr);
    ++uses_;
    return st;
  }

  Status do_send(int to, std::span<const std::byte> data) override {
    const uint64_t length = data.size();
    ACTORD_TRY_STATUS(put(to, reinterpret_cast<const std::byte*>(&length), sizeof(length)));
    return put(to, data.data(), data.size());
  }

  Status do_recv(int from, std::span<std::byte> out) override {
    uint64_t length = 0;
    ACTORD_TRY_STATUS(get(from, reinterpret_cast<std::byte*>(&length), sizeof(length)));
    if (length != out.size()) {
      return make_error(Errc::invalid_argument, "rank " + std::to_string(from) + " sent " + std::to_string(length) +
                                                    " bytes, this rank receives " + std::to_string(out.size()));
    }
    return get(from, out.data(), out.size());
  }

 private:
  template <class T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(seg_.data() + offset);
  }
  SegmentHeader& header() const { return *at<SegmentHeader>(0); }
  int parity() const { return static_cast<int>(uses_ & 1); }
  std::byte* slot(int r) const {
    return seg_.data() + layout_.slots +
           (static_cast<size_t>(parity()) * static_cast<size_t>(size()) + static_cast<size_t>(r)) * spec().slot_bytes;
  }
  float* slot_floats(int r) const { return reinterpret_cast<float*>(slot(r)); }
  Desc& desc(int r) const { return at<DescPair>(layout_.descs)[r].by_parity[parity()]; }
  uint64_t* counts_row(int r) const {
    const size_t n = static_cast<size_t>(size());
    return at<uint64_t>(layout_.counts) + (static_cast<size_t>(r) * 2 + static_cast<size_t>(parity())) * n;
  }
  Channel& channel(int from, int to) const { return at<Channel>(layout_.channels)[from * size() + to]; }
  std::byte* ring(int from, int to) const {
    return seg_.data() + layout_.rings + static_cast<size_t>(from * size() + to) * spec().channel_bytes;
  }

  // Publishes this rank's descriptor (and counts, when the operation has them), waits for every peer, checks that
  // they run the same operation on the same sizes, and notes when the last one arrived.
  Status arrive(const Desc& d, const std::span<const size_t>* counts) {
    desc(rank()) = d;
    desc(rank()).posted_ns = StepTrace::now_ns();
    if (counts != nullptr) std::copy(counts->begin(), counts->end(), counts_row(rank()));
    board_.publish();
    ACTORD_TRY_STATUS(board_.wait_all());
    for (int r = 0; r < size(); ++r) {
      const Desc& p = desc(r);
      note_arrival(p.posted_ns);
      if (p.kind != d.kind || p.total != d.total || p.piece != d.piece) {
        return make_error(Errc::invalid_argument, "rank " + std::to_string(r) + " called " +
                                                      describe_op(p.kind, p.total) + " where this rank called " +
                                                      describe_op(d.kind, d.total));
      }
      if (counts != nullptr && d.kind != OpKind::all_to_all &&
          !std::equal(counts->begin(), counts->end(), counts_row(r))) {
        return make_error(Errc::invalid_argument,
                          "rank " + std::to_string(r) + " split the data by other counts than this rank");
      }
    }
    return Status::success();
  }

  // Streams n bytes into the ring towards `to`, waiting for room when it is full.
  Status put(int to, const std::byte* p, size_t n) {
    return ring_put(channel(rank(), to), ring(rank(), to), spec().channel_bytes, p, n, [&](SyncWord& w, auto ready) {
      return wait_until(w, ready, [&] { return board_.failure(to); }, board_.deadline(),
                        [&] { return board_.timeout_error(to, "did not receive"); });
    });
  }

  // Takes n bytes from the ring from `from`, waiting for them.
  Status get(int from, std::byte* p, size_t n) {
    return ring_take(channel(from, rank()), ring(from, rank()), spec().channel_bytes, p, n,
                     [&](SyncWord& w, auto ready) {
                       return wait_until(w, ready, [&] { return board_.failure(from); }, board_.deadline(),
                                         [&] { return board_.timeout_error(from, "sent nothing"); });
                     });
  }

  ShmSegment seg_;
  Layout layout_;
  PhaseBoard board_;
  size_t owner_floats_ = 0;
  uint32_t uses_ = 0;  // slot uses so far: their parity picks the slot
  std::vector<const void*> src_ = std::vector<const void*>(static_cast<size_t>(size()));  // [size] scratch
};

// Rank 0 lays out a fresh segment: every shared structure constructed in place, then `ready`.
void lay_out(std::byte* base, const GroupSpec& spec, const Layout& layout) {
  const size_t n = static_cast<size_t>(spec.size);
  auto* header = new (base) SegmentHeader();
  new (base + layout.abort) AbortState();
  for (size_t r = 0; r < n; ++r) new (base + layout.ranks + r * sizeof(RankState)) RankState();
  for (size_t r = 0; r < n; ++r) new (base + layout.descs + r * sizeof(DescPair)) DescPair();
  for (size_t c = 0; c < n * n; ++c) new (base + layout.channels + c * sizeof(Channel)) Channel();
  header->magic = kMagic;
  header->version = kVersion;
  header->size = spec.size;
  header->id = spec.id;
  header->slot_bytes = spec.slot_bytes;
  header->channel_bytes = spec.channel_bytes;
  header->ready.store(1, std::memory_order_release);
}

Status check_header(const SegmentHeader& h, const GroupSpec& spec, const std::string& name) {
  auto mismatch = [&](const char* field, uint64_t theirs, uint64_t ours) {
    return make_error(Errc::invalid_argument, "shared memory segment " + name + " was made for " + field + " " +
                                                  std::to_string(theirs) + ", this rank has " + std::to_string(ours));
  };
  if (h.magic != kMagic || h.version != kVersion) {
    return make_error(Errc::invalid_argument, "shared memory segment " + name +
                                                  " is not a collectives segment of "
                                                  "this version");
  }
  if (h.size != spec.size) return mismatch("size", static_cast<uint64_t>(h.size), static_cast<uint64_t>(spec.size));
  if (h.id != spec.id) return mismatch("id", h.id, spec.id);
  if (h.slot_bytes != spec.slot_bytes) return mismatch("slot_bytes", h.slot_bytes, spec.slot_bytes);
  if (h.channel_bytes != spec.channel_bytes) return mismatch("channel_bytes", h.channel_bytes, spec.channel_bytes);
  return Status::success();
}

}  // namespace

Result<std::unique_ptr<Communicator>> join_shm_group(const GroupSpec& spec, int rank) {
  ACTORD_TRY_STATUS(validate(spec));
  const std::string prefix =
      describe(spec) + ", rank " + std::to_string(rank) + " of " + std::to_string(spec.size) + ", join: ";
  auto fail = [&](const Error& e) { return make_error(e.code, prefix + e.message); };
  if (rank < 0 || rank >= spec.size) return fail(make_error(Errc::invalid_argument, "no such rank"));
  const Layout layout(spec.size, spec.slot_bytes, spec.channel_bytes);
  const std::string name = shm_segment_name(spec);
  const auto deadline = Clock::now() + spec.timeout;
  Result<ShmSegment> seg = make_error(Errc::internal, "unset");
  if (rank == 0) {
    ShmSegment::remove_stale();
    seg = ShmSegment::create(name, layout.total);
    if (seg.ok()) lay_out(seg->data(), spec, layout);
  } else {
    seg = ShmSegment::open(name, layout.total, deadline);
  }
  if (!seg.ok()) return fail(seg.error());
  auto& header = *reinterpret_cast<SegmentHeader*>(seg->data());
  while (header.ready.load(std::memory_order_acquire) == 0) {
    if (Clock::now() >= deadline) return fail(make_error(Errc::worker_failed, "rank 0 did not finish the segment"));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (Status st = check_header(header, spec, name); !st.ok()) return fail(st.error());
  auto comm = std::make_unique<ShmCommunicator>(spec, rank, std::move(*seg));
  if (Status st = comm->join(); !st.ok()) return fail(st.error());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace actord::coll
