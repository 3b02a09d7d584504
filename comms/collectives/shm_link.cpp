#include "comms/collectives/shm_link.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "comms/collectives/byte_ring.hpp"
#include "comms/collectives/futex_sync.hpp"

namespace actord::coll {

namespace {

// How long a receiver spins before it sleeps: a message that comes within this time is taken without a system call.
constexpr auto kSpin = std::chrono::microseconds(3);
// Once a message began, the rest must follow within this time (the writer streams it as the reader frees room).
constexpr auto kRestOfMessage = std::chrono::seconds(30);
constexpr uint32_t kMaxFrames = 1u << 16;

}  // namespace

struct ShmLink::Ring : RingCounters {};

namespace {

struct alignas(64) LinkHeader {
  std::atomic<uint64_t> beats{0};
};

constexpr size_t kRingsAt = sizeof(LinkHeader);

size_t round_ring(size_t bytes) { return std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096); }
size_t segment_bytes(size_t ring_bytes) { return kRingsAt + 2 * sizeof(ShmLink::Ring) + 2 * ring_bytes; }

// Waits until ready(): spins briefly, then sleeps on w in slices, asking give_up() before each sleep. Returns false
// at the deadline.
template <class Ready>
Result<bool> wait_for(SyncWord& w, Ready&& ready, ShmLink::Clock::time_point deadline, const ShmLink::GiveUp& give_up) {
  if (ready()) return true;
  const auto spin_end = ShmLink::Clock::now() + kSpin;
  for (unsigned i = 1;; ++i) {
    cpu_relax();
    if (ready()) return true;
    if ((i & 15) == 0 && ShmLink::Clock::now() >= spin_end) break;
  }
  for (;;) {
    if (give_up) {
      if (std::optional<Error> e = give_up()) return *e;
    }
    const auto now = ShmLink::Clock::now();
    if (now >= deadline) return false;
    w.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = w.value.load(std::memory_order_seq_cst);
    if (ready()) {
      w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return true;
    }
    sleep_while(w, seen, std::min<ShmLink::Clock::duration>(deadline - now, kSleepSlice));
    w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready()) return true;
  }
}

}  // namespace

std::string ShmLink::segment_name(int pid, std::string_view tag) {
  std::string t(tag);
  std::replace(t.begin(), t.end(), '/', '-');
  return "/actord-coll-" + std::to_string(pid) + "-link-" + t;
}

ShmLink::ShmLink(ShmSegment seg, End end, size_t ring_bytes) : seg_(std::move(seg)), end_(end), ring_bytes_(ring_bytes) {
  std::byte* base = seg_.data();
  auto* to_worker = reinterpret_cast<Ring*>(base + kRingsAt);
  auto* to_engine = reinterpret_cast<Ring*>(base + kRingsAt + sizeof(Ring));
  std::byte* to_worker_data = base + kRingsAt + 2 * sizeof(Ring);
  std::byte* to_engine_data = to_worker_data + ring_bytes;
  const bool engine = end == End::engine;
  out_ = engine ? to_worker : to_engine;
  in_ = engine ? to_engine : to_worker;
  out_data_ = engine ? to_worker_data : to_engine_data;
  in_data_ = engine ? to_engine_data : to_worker_data;
}

Result<ShmLink> ShmLink::create(const std::string& name, size_t ring_bytes) {
  ring_bytes = round_ring(ring_bytes);
  ShmSegment::remove_stale();
  Result<ShmSegment> created = ShmSegment::create(name, segment_bytes(ring_bytes));
  if (!created.ok()) return created.error();
  ShmSegment seg = std::move(*created);
  // A fresh segment is zero-filled, which is every field's initial value; construct them for the record.
  new (seg.data()) LinkHeader();
  new (seg.data() + kRingsAt) Ring();
  new (seg.data() + kRingsAt + sizeof(Ring)) Ring();
  return ShmLink(std::move(seg), End::engine, ring_bytes);
}

Result<ShmLink> ShmLink::open(const std::string& name, Clock::time_point deadline, size_t ring_bytes) {
  ring_bytes = round_ring(ring_bytes);
  Result<ShmSegment> seg = ShmSegment::open(name, segment_bytes(ring_bytes), deadline);
  if (!seg.ok()) return seg.error();
  return ShmLink(std::move(*seg), End::worker, ring_bytes);
}

void ShmLink::beat() { reinterpret_cast<LinkHeader*>(seg_.data())->beats.fetch_add(1, std::memory_order_relaxed); }

uint64_t ShmLink::beats() const {
  return reinterpret_cast<const LinkHeader*>(seg_.data())->beats.load(std::memory_order_relaxed);
}

Status ShmLink::put(const std::byte* p, size_t n, Clock::time_point deadline, const GiveUp& give_up) {
  return ring_put(*out_, out_data_, ring_bytes_, p, n, [&](SyncWord& w, auto ready) -> Status {
    Result<bool> room = wait_for(w, ready, deadline, give_up);
    if (!room.ok()) return room.error();
    if (!*room) return make_error(Errc::worker_failed, "shared memory link " + name() + ": the peer takes nothing");
    return Status::success();
  });
}

Status ShmLink::take(std::byte* p, size_t n, Clock::time_point deadline, const GiveUp& give_up) {
  return ring_take(*in_, in_data_, ring_bytes_, p, n, [&](SyncWord& w, auto ready) -> Status {
    Result<bool> some = wait_for(w, ready, deadline, give_up);
    if (!some.ok()) return some.error();
    if (!*some) return make_error(Errc::worker_failed, "shared memory link " + name() + ": a message stopped half-way");
    return Status::success();
  });
}

// A message: the frame count (u32), each frame's length (u64), then the frames' bytes, back to back. A message that
// fits the ring is published at once (one signal, so a sleeping reader wakes once and finds it whole); a larger one
// streams through in pieces.
Status ShmLink::send(std::span<const std::span<const std::byte>> frames, Clock::time_point deadline,
                     const GiveUp& give_up) {
  if (frames.size() > kMaxFrames) return make_error(Errc::invalid_argument, "shared memory link: too many frames");
  std::vector<std::byte> head(sizeof(uint32_t) + frames.size() * sizeof(uint64_t));
  const auto count = static_cast<uint32_t>(frames.size());
  std::memcpy(head.data(), &count, sizeof(count));
  uint64_t total = head.size();
  for (size_t i = 0; i < frames.size(); ++i) {
    const uint64_t len = frames[i].size();
    std::memcpy(head.data() + sizeof(uint32_t) + i * sizeof(uint64_t), &len, sizeof(len));
    total += len;
  }
  if (total > ring_bytes_) {
    ACTORD_TRY_STATUS(put(head.data(), head.size(), deadline, give_up));
    for (const auto& f : frames) ACTORD_TRY_STATUS(put(f.data(), f.size(), deadline, give_up));
    return Status::success();
  }
  Ring& r = *out_;
  const uint64_t cap = ring_bytes_;
  uint64_t at = r.head.load(std::memory_order_relaxed);
  Result<bool> room =
      wait_for(r.read, [&] { return cap - (at - r.tail.load(std::memory_order_acquire)) >= total; }, deadline, give_up);
  if (!room.ok()) return room.error();
  if (!*room) return make_error(Errc::worker_failed, "shared memory link " + name() + ": the peer takes nothing");
  auto copy = [&](const std::byte* p, size_t n) {
    ring_copy_in(out_data_, cap, at, p, n);
    at += n;
  };
  copy(head.data(), head.size());
  for (const auto& f : frames) copy(f.data(), f.size());
  r.head.store(at, std::memory_order_release);
  signal(r.written);
  return Status::success();
}

Result<std::optional<ShmLink::Frames>> ShmLink::recv(std::chrono::nanoseconds wait, const GiveUp& give_up) {
  Ring& r = *in_;
  const uint64_t tail = r.tail.load(std::memory_order_relaxed);
  Result<bool> began =
      wait_for(r.written, [&] { return r.head.load(std::memory_order_acquire) != tail; }, Clock::now() + wait, give_up);
  if (!began.ok()) return began.error();
  if (!*began) return std::optional<Frames>{};
  const auto deadline = Clock::now() + kRestOfMessage;
  uint32_t count = 0;
  ACTORD_TRY_STATUS(take(reinterpret_cast<std::byte*>(&count), sizeof(count), deadline, give_up));
  if (count > kMaxFrames) {
    return make_error(Errc::parse_error, "shared memory link " + name() + ": a message of " + std::to_string(count) +
                                             " frames (at most " + std::to_string(kMaxFrames) + ")");
  }
  std::vector<uint64_t> lengths(count);
  ACTORD_TRY_STATUS(take(reinterpret_cast<std::byte*>(lengths.data()), count * sizeof(uint64_t), deadline, give_up));
  Frames frames(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (lengths[i] > (uint64_t{1} << 40)) {
      return make_error(Errc::parse_error, "shared memory link " + name() + ": a frame of " +
                                               std::to_string(lengths[i]) + " bytes");
    }
    frames[i].resize(static_cast<size_t>(lengths[i]));
    ACTORD_TRY_STATUS(take(reinterpret_cast<std::byte*>(frames[i].data()), frames[i].size(), deadline, give_up));
  }
  return std::optional<Frames>{std::move(frames)};
}

}  // namespace actord::coll
