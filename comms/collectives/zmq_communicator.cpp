#include "comms/collectives/zmq_communicator.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <zmq.hpp>

#include "comms/collectives/futex_sync.hpp"
#include "comms/zmq_link.hpp"

namespace actord::coll {
namespace {

constexpr uint32_t kMagic = 0x6c6f6361;  // "acol"
// How long after a peer's connection ended its goodbye may still arrive (it travels on the other connection).
constexpr std::chrono::milliseconds kGoodbyeGrace{100};

enum class Kind : uint8_t { hello = 1, table, coll, p2p, abort, bye };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::hello: return "hello";
    case Kind::table: return "table";
    case Kind::coll: return "collective";
    case Kind::p2p: return "send";
    case Kind::abort: return "abort";
    case Kind::bye: return "goodbye";
  }
  return "unknown";
}

struct Header {
  uint32_t magic = kMagic;
  Kind kind = Kind::coll;
  uint8_t pad = 0;
  uint16_t src = 0;
  uint32_t step = 0;   // reduce-scatter 0, all-gather ring step s + 1; hello: the sender's group size
  uint32_t piece = 0;  // frame index within the step
  uint64_t group_id = 0;
  uint64_t seq = 0;  // collective: operation number; send: message number between the pair; 0 while joining
};
static_assert(sizeof(Header) == 32);

// Where a message belongs: what the receiver expects next from a peer.
struct Tag {
  Kind kind;
  uint64_t seq;
  uint32_t step;
  uint32_t piece;
};

std::string describe_tag(const Tag& t) {
  return std::string(kind_name(t.kind)) + " #" + std::to_string(t.seq) + " step " + std::to_string(t.step) + " piece " +
         std::to_string(t.piece);
}

size_t piece_len(size_t count, size_t piece, size_t per_piece) {
  const size_t start = piece * per_piece;
  return count > start ? std::min(per_piece, count - start) : 0;
}
size_t pieces_for(size_t count, size_t per_piece) { return std::max<size_t>(1, (count + per_piece - 1) / per_piece); }

std::vector<size_t> offsets_of(std::span<const size_t> counts) {
  std::vector<size_t> offs(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offs[i + 1] = offs[i] + counts[i];
  return offs;
}

class ZmqCommunicator final : public Communicator {
 public:
  ZmqCommunicator(GroupSpec spec, int rank)
      : Communicator(std::move(spec), rank),
        ctx_(1),
        out_(static_cast<size_t>(size())),
        monitors_(static_cast<size_t>(size())),
        disconnected_(static_cast<size_t>(size())),
        stash_(static_cast<size_t>(size())),
        left_(static_cast<size_t>(size()), false),
        sent_(static_cast<size_t>(size()), 0),
        received_(static_cast<size_t>(size()), 0) {}

  ~ZmqCommunicator() override {
    // Goodbye frames go after everything this rank sent, so a peer still waiting for this rank learns at once.
    // What is still queued for a live peer is delivered before the sockets close (up to the timeout; frames for a
    // peer whose connection is gone are dropped with it at once).
    const int linger = broken_ ? 0 : static_cast<int>(std::min<int64_t>(spec().timeout.count(), INT_MAX));
    for (int r = 0; r < size(); ++r) {
      if (!out_[static_cast<size_t>(r)]) continue;
      if (!broken_) send_frame(r, {Kind::bye, 0, 0, 0}, nullptr, 0, zmq::send_flags::dontwait);
      out_[static_cast<size_t>(r)].set(zmq::sockopt::linger, linger);
      out_[static_cast<size_t>(r)].close();
    }
    for (zmq::socket_t& m : monitors_) {
      if (!m) continue;
      m.set(zmq::sockopt::linger, 0);
      m.close();
    }
    if (inbox_) {
      inbox_.set(zmq::sockopt::linger, 0);
      inbox_.close();
    }
  }

  Backend backend() const override { return Backend::zmq; }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (!abort_requested_.load()) abort_reason_ = reason;
    abort_requested_.store(true);
  }

  // Binds, meets the others through rank 0 and connects to every peer; on failure tells the peers reached so far.
  Status join() {
    Status st = meet();
    if (!st.ok()) on_failure("join: " + st.error().message);
    return st;
  }

 protected:
  void on_failure(const std::string& reason) override {
    broken_ = true;
    for (int r = 0; r < size(); ++r) {
      if (out_[static_cast<size_t>(r)]) {
        send_frame(r, {Kind::abort, 0, 0, 0}, reason.data(), reason.size(), zmq::send_flags::dontwait);
      }
    }
  }

 private:
  Status meet() {
    const size_t me = static_cast<size_t>(rank());
    try {
      inbox_ = zmq::socket_t(ctx_, zmq::socket_type::pull);
      inbox_.set(zmq::sockopt::rcvhwm, 0);
      inbox_.set(zmq::sockopt::linger, 0);
      inbox_.bind(spec().endpoints[me]);
    } catch (const zmq::error_t& e) {
      return make_error(Errc::invalid_argument, "cannot bind endpoints[" + std::to_string(me) + "] '" +
                                                    spec().endpoints[me] + "': " + e.what());
    }
    if (size() == 1) return Status::success();
    std::vector<std::string> table(static_cast<size_t>(size()));
    table[me] = inbox_.get(zmq::sockopt::last_endpoint);
    if (rank() != 0) {
      ACTORD_TRY_STATUS(connect_to(0, spec().endpoints[0]));
      ACTORD_TRY_STATUS(send_frame_checked(0, {Kind::hello, 0, static_cast<uint32_t>(size()), 0}, table[me].data(),
                                           table[me].size()));
      Result<zmq::message_t> msg = receive(0, {Kind::table, 0, 0, 0});
      if (!msg.ok()) return msg.error();
      const std::string text(static_cast<const char*>(msg->data()), msg->size());
      size_t at = 0;
      for (size_t r = 0; r < table.size(); ++r) {
        const size_t end = text.find('\n', at);
        table[r] = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
        at = end == std::string::npos ? text.size() : end + 1;
      }
      for (int r = 1; r < size(); ++r) {
        if (r != rank()) ACTORD_TRY_STATUS(connect_to(r, table[static_cast<size_t>(r)]));
      }
    } else {
      for (int r = 1; r < size(); ++r) {
        Result<zmq::message_t> msg = receive(r, {Kind::hello, 0, 0, 0}, /*any_step=*/true);
        if (!msg.ok()) return msg.error();
        if (hello_size_[static_cast<size_t>(r)] != static_cast<uint32_t>(size())) {
          return make_error(Errc::invalid_argument, "rank " + std::to_string(r) + " joined a group of size " +
                                                        std::to_string(hello_size_[static_cast<size_t>(r)]) +
                                                        ", this rank's has " + std::to_string(size()));
        }
        table[static_cast<size_t>(r)].assign(static_cast<const char*>(msg->data()), msg->size());
      }
      std::string text;
      for (size_t r = 0; r < table.size(); ++r) text += (r ? "\n" : "") + table[r];
      for (int r = 1; r < size(); ++r) {
        ACTORD_TRY_STATUS(connect_to(r, table[static_cast<size_t>(r)]));
        ACTORD_TRY_STATUS(send_frame_checked(r, {Kind::table, 0, 0, 0}, text.data(), text.size()));
      }
    }
    return Status::success();
  }

 protected:
  Status do_all_reduce(std::span<float> data) override {
    ACTORD_TRY_STATUS(requested_abort());
    const uint64_t seq = ++op_seq_;
    const std::vector<size_t> counts = balanced_counts(data.size(), size());
    ACTORD_TRY_STATUS(reduce_to_owners(seq, data.data(), counts, data.data() + offsets_of(counts)[rank()]));
    return ring_gather(seq, reinterpret_cast<std::byte*>(data.data()), scaled(counts, sizeof(float)));
  }

  Status do_all_gather(std::span<const std::byte> in, std::span<std::byte> out,
                       std::span<const size_t> counts) override {
    ACTORD_TRY_STATUS(requested_abort());
    const uint64_t seq = ++op_seq_;
    const std::vector<size_t> byte_counts(counts.begin(), counts.end());
    if (!in.empty()) std::memcpy(out.data() + offsets_of(byte_counts)[rank()], in.data(), in.size());
    return ring_gather(seq, out.data(), byte_counts);
  }

  Status do_reduce_scatter(std::span<const float> in, std::span<float> out, std::span<const size_t> counts) override {
    ACTORD_TRY_STATUS(requested_abort());
    const uint64_t seq = ++op_seq_;
    const std::vector<size_t> c(counts.begin(), counts.end());
    return reduce_to_owners(seq, in.data(), c, out.data());
  }

  Status do_all_to_all(std::span<const std::byte> in, std::span<const size_t> send_bytes, Sink& sink) override {
    ACTORD_TRY_STATUS(requested_abort());
    const uint64_t seq = ++op_seq_;
    const std::vector<size_t> send_off = offsets_of(send_bytes);
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      ACTORD_TRY_STATUS(send_frame_checked(r, {Kind::coll, seq, 0, 0}, in.data() + send_off[static_cast<size_t>(r)],
                                           send_bytes[static_cast<size_t>(r)]));
    }
    std::vector<zmq::message_t> blocks(static_cast<size_t>(size()));
    std::vector<size_t> recv(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) {
        recv[static_cast<size_t>(r)] = send_bytes[static_cast<size_t>(r)];
        continue;
      }
      Result<zmq::message_t> msg = receive(r, {Kind::coll, seq, 0, 0});
      if (!msg.ok()) return msg.error();
      recv[static_cast<size_t>(r)] = msg->size();
      blocks[static_cast<size_t>(r)] = std::move(*msg);
    }
    Result<std::span<std::byte>> out = place(sink, recv);
    if (!out.ok()) return out.error();
    size_t at = 0;
    for (int r = 0; r < size(); ++r) {
      const size_t n = recv[static_cast<size_t>(r)];
      const void* from = r == rank() ? static_cast<const void*>(in.data() + send_off[static_cast<size_t>(r)])
                                     : blocks[static_cast<size_t>(r)].data();
      if (n > 0) std::memcpy(out->data() + at, from, n);
      at += n;
    }
    return Status::success();
  }

  Status do_barrier() override {
    ACTORD_TRY_STATUS(requested_abort());
    const uint64_t seq = ++op_seq_;
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) ACTORD_TRY_STATUS(send_frame_checked(r, {Kind::coll, seq, 0, 0}, nullptr, 0));
    }
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      Result<zmq::message_t> msg = receive(r, {Kind::coll, seq, 0, 0});
      if (!msg.ok()) return msg.error();
      if (msg->size() != 0) return mismatch(r, "a barrier", msg->size());
    }
    return Status::success();
  }

  Status do_send(int to, std::span<const std::byte> data) override {
    ACTORD_TRY_STATUS(requested_abort());
    const uint64_t seq = ++sent_[static_cast<size_t>(to)];
    return send_frame_checked(to, {Kind::p2p, seq, 0, 0}, data.data(), data.size());
  }

  Status do_recv(int from, std::span<std::byte> out) override {
    ACTORD_TRY_STATUS(requested_abort());
    const uint64_t seq = ++received_[static_cast<size_t>(from)];
    Result<zmq::message_t> msg = receive(from, {Kind::p2p, seq, 0, 0});
    if (!msg.ok()) return msg.error();
    if (msg->size() != out.size()) {
      return make_error(Errc::invalid_argument, "rank " + std::to_string(from) + " sent " +
                                                    std::to_string(msg->size()) + " bytes, this rank receives " +
                                                    std::to_string(out.size()));
    }
    if (!out.empty()) std::memcpy(out.data(), msg->data(), out.size());
    return Status::success();
  }

 private:
  static std::vector<size_t> scaled(const std::vector<size_t>& counts, size_t factor) {
    std::vector<size_t> out(counts);
    for (size_t& c : out) c *= factor;
    return out;
  }

  // Reduce-scatter: every rank sends each owner its part of `in` (split by counts, in pieces); the owner adds the
  // parts of all ranks, its own included, in rank order into `dst` ([counts[rank]]; may alias its part of in).
  Status reduce_to_owners(uint64_t seq, const float* in, const std::vector<size_t>& counts, float* dst) {
    const std::vector<size_t> offs = offsets_of(counts);
    const size_t q = spec().piece_bytes / sizeof(float);
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      const size_t c = counts[static_cast<size_t>(r)];
      for (size_t k = 0; k < pieces_for(c, q); ++k) {
        ACTORD_TRY_STATUS(send_frame_checked(r, {Kind::coll, seq, 0, static_cast<uint32_t>(k)},
                                             in + offs[static_cast<size_t>(r)] + k * q,
                                             piece_len(c, k, q) * sizeof(float)));
      }
    }
    const size_t mine = counts[static_cast<size_t>(rank())];
    std::vector<zmq::message_t> parts(static_cast<size_t>(size()));
    std::vector<const void*> src(static_cast<size_t>(size()));
    for (size_t k = 0; k < pieces_for(mine, q); ++k) {
      const size_t n = piece_len(mine, k, q);
      for (int r = 0; r < size(); ++r) {
        if (r == rank()) {
          src[static_cast<size_t>(r)] = in + offs[static_cast<size_t>(r)] + k * q;
          continue;
        }
        Result<zmq::message_t> msg = receive(r, {Kind::coll, seq, 0, static_cast<uint32_t>(k)});
        if (!msg.ok()) return msg.error();
        if (msg->size() != n * sizeof(float)) return mismatch(r, "its part", msg->size(), n * sizeof(float));
        parts[static_cast<size_t>(r)] = std::move(*msg);
        src[static_cast<size_t>(r)] = parts[static_cast<size_t>(r)].data();
      }
      sum_in_rank_order(src.data(), size(), dst + k * q, n);
    }
    return Status::success();
  }

  // All-gather around the ring: buf holds every rank's part at its offset (counts in bytes); this rank's is in
  // place. At step s rank r sends part r - s to r + 1 and receives part r - s - 1 from r - 1.
  Status ring_gather(uint64_t seq, std::byte* buf, const std::vector<size_t>& counts) {
    const int n = size();
    if (n == 1) return Status::success();
    const std::vector<size_t> offs = offsets_of(counts);
    const size_t q = spec().piece_bytes;
    const int right = (rank() + 1) % n;
    const int left = (rank() + n - 1) % n;
    for (int s = 0; s < n - 1; ++s) {
      const size_t out_part = static_cast<size_t>((rank() - s + n) % n);
      const size_t in_part = static_cast<size_t>((rank() - s - 1 + 2 * n) % n);
      const uint32_t step = static_cast<uint32_t>(s + 1);
      for (size_t k = 0; k < pieces_for(counts[out_part], q); ++k) {
        ACTORD_TRY_STATUS(send_frame_checked(right, {Kind::coll, seq, step, static_cast<uint32_t>(k)},
                                             buf + offs[out_part] + k * q, piece_len(counts[out_part], k, q)));
      }
      for (size_t k = 0; k < pieces_for(counts[in_part], q); ++k) {
        Result<zmq::message_t> msg = receive(left, {Kind::coll, seq, step, static_cast<uint32_t>(k)});
        if (!msg.ok()) return msg.error();
        const size_t len = piece_len(counts[in_part], k, q);
        if (msg->size() != len) return mismatch(left, "a part", msg->size(), len);
        if (len > 0) std::memcpy(buf + offs[in_part] + k * q, msg->data(), len);
      }
    }
    return Status::success();
  }

  Error mismatch(int peer, const char* what, size_t got, size_t want = 0) const {
    return make_error(Errc::invalid_argument, "rank " + std::to_string(peer) + " sent " + std::string(what) + " of " +
                                                  std::to_string(got) + " bytes, this rank expects " +
                                                  std::to_string(want) +
                                                  " (the ranks disagree on the operation's sizes)");
  }

  Status requested_abort() {
    if (!abort_requested_.load()) return Status::success();
    std::lock_guard<std::mutex> lock(abort_mu_);
    return make_error(Errc::worker_failed, "aborted: " + abort_reason_);
  }

  Status connect_to(int r, const std::string& endpoint) {
    try {
      zmq::socket_t s(ctx_, zmq::socket_type::push);
      s.set(zmq::sockopt::sndhwm, 0);
      s.set(zmq::sockopt::reconnect_ivl, 10);
      // Queue only on a live connection: messages for a peer that closed (or died) are dropped with its connection
      // instead of holding this rank's close for the linger time, and a send to a peer that is gone fails.
      s.set(zmq::sockopt::immediate, 1);
      // The connection's end is this rank's news of the peer's death (or its node's loss): watch for it.
      const std::string monitor = "inproc://monitor-" + std::to_string(r);
      if (zmq_socket_monitor(s.handle(), monitor.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) throw zmq::error_t();
      zmq::socket_t m(ctx_, zmq::socket_type::pair);
      m.connect(monitor);
      s.connect(endpoint);
      out_[static_cast<size_t>(r)] = std::move(s);
      monitors_[static_cast<size_t>(r)] = std::move(m);
    } catch (const zmq::error_t& e) {
      return make_error(Errc::invalid_argument,
                        "cannot connect to rank " + std::to_string(r) + " at '" + endpoint + "': " + e.what());
    }
    return Status::success();
  }

  bool send_frame(int to, const Tag& tag, const void* data, size_t n, zmq::send_flags flags) {
    Header h;
    h.kind = tag.kind;
    h.src = static_cast<uint16_t>(rank());
    h.step = tag.step;
    h.piece = tag.piece;
    h.group_id = spec().id;
    h.seq = tag.seq;
    zmq::socket_t& s = out_[static_cast<size_t>(to)];
    try {
      if (!s.send(zmq::const_buffer(&h, sizeof(h)), flags | zmq::send_flags::sndmore)) return false;
      // Once the first frame is queued, the second is accepted too (ZeroMQ queues a multipart message whole).
      zmq::message_t body(n);
      if (n > 0) std::memcpy(body.data(), data, n);
      return s.send(std::move(body), flags).has_value();
    } catch (const zmq::error_t&) {
      return false;
    }
  }

  // Queues a message for `to`. Queues are unbounded, so this waits only while there is no connection to the peer
  // (not yet made, or lost: then the peer is reported lost), up to the timeout.
  Status send_frame_checked(int to, const Tag& tag, const void* data, size_t n) {
    const auto deadline = Clock::now() + spec().timeout;
    while (!send_frame(to, tag, data, n, zmq::send_flags::dontwait)) {
      if (peer_abort_) return *peer_abort_;
      ACTORD_TRY_STATUS(requested_abort());
      ACTORD_TRY_STATUS(lost_peer());
      if (Clock::now() >= deadline) {
        return make_error(Errc::worker_failed, "could not reach rank " + std::to_string(to) + " within " +
                                                   std::to_string(spec().timeout.count()) + " ms");
      }
      wait_for_events(std::chrono::milliseconds(1));
    }
    return Status::success();
  }

  // Waits up to `limit` for anything on the inbox or the monitors, and takes it in; under two-batch overlap the
  // other micro-batches run instead and it only looks.
  void wait_for_events(std::chrono::milliseconds limit) {
    if (run_other_micro_batches()) limit = std::chrono::milliseconds(0);
    std::vector<zmq::pollitem_t> items{{inbox_.handle(), 0, ZMQ_POLLIN, 0}};
    for (zmq::socket_t& m : monitors_) {
      if (m) items.push_back(zmq::pollitem_t{m.handle(), 0, ZMQ_POLLIN, 0});
    }
    poll_through_signals(items.data(), items.size(), limit);
    if (items[0].revents & ZMQ_POLLIN) drain();
    for (size_t i = 1; i < items.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) {
        read_monitors();
        break;
      }
    }
  }

  // The next message from `from`, which must carry `want`; waits up to the timeout. Messages from other peers that
  // arrive meanwhile are kept for later, in order.
  Result<zmq::message_t> receive(int from, const Tag& want, bool any_step = false) {
    const auto deadline = Clock::now() + spec().timeout;
    std::deque<Inbound>& queue = stash_[static_cast<size_t>(from)];
    for (;;) {
      if (!queue.empty()) {
        Inbound m = std::move(queue.front());
        queue.pop_front();
        if (m.h.kind != want.kind || m.h.seq != want.seq || (!any_step && m.h.step != want.step) ||
            m.h.piece != want.piece) {
          const Tag got{m.h.kind, m.h.seq, m.h.step, m.h.piece};
          return make_error(Errc::invalid_argument, "rank " + std::to_string(from) + " sent " + describe_tag(got) +
                                                        " where this rank expects " + describe_tag(want) +
                                                        " (the ranks are not in the same operation)");
        }
        return std::move(m.body);
      }
      if (peer_abort_) return *peer_abort_;
      if (left_[static_cast<size_t>(from)]) {
        return make_error(Errc::worker_failed, "rank " + std::to_string(from) + " left the group");
      }
      ACTORD_TRY_STATUS(requested_abort());
      ACTORD_TRY_STATUS(lost_peer());
      const auto now = Clock::now();
      if (now >= deadline) {
        return make_error(Errc::worker_failed, "rank " + std::to_string(from) + " sent nothing within " +
                                                   std::to_string(spec().timeout.count()) +
                                                   " ms (it or a rank "
                                                   "before it died or hangs)");
      }
      const auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(20));
      wait_for_events(std::chrono::duration_cast<std::chrono::milliseconds>(slice) + std::chrono::milliseconds(1));
    }
  }

  // Notes the time each peer's connection ended.
  void read_monitors() {
    for (size_t r = 0; r < monitors_.size(); ++r) {
      if (!monitors_[r]) continue;
      for (;;) {
        zmq::message_t event, address;
        if (!monitors_[r].recv(event, zmq::recv_flags::dontwait)) break;
        if (event.more()) (void)monitors_[r].recv(address, zmq::recv_flags::none);
        uint16_t id = 0;
        if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
        if (id == ZMQ_EVENT_DISCONNECTED && !disconnected_[r]) disconnected_[r] = Clock::now();
      }
    }
  }

  // A peer whose connection ended without a goodbye: its process died or its node is gone. The goodbye of a peer
  // that closed normally travels on the other connection, so it gets a short grace to arrive.
  Status lost_peer() const {
    const auto now = Clock::now();
    for (size_t r = 0; r < disconnected_.size(); ++r) {
      if (disconnected_[r] && !left_[r] && now - *disconnected_[r] > kGoodbyeGrace) {
        return make_error(Errc::worker_failed,
                          "rank " + std::to_string(r) + " disconnected (its process ended or its node is unreachable)");
      }
    }
    return Status::success();
  }

  // Takes every message waiting on the inbox into the peers' queues.
  void drain() {
    for (;;) {
      zmq::message_t head;
      if (!inbox_.recv(head, zmq::recv_flags::dontwait)) return;
      zmq::message_t body;
      if (head.more()) {
        (void)inbox_.recv(body, zmq::recv_flags::none);
        while (body.more()) {  // not ours: skip extra frames
          zmq::message_t extra;
          (void)inbox_.recv(extra, zmq::recv_flags::none);
          if (!extra.more()) break;
        }
      }
      Header h;
      if (head.size() != sizeof(Header)) continue;
      std::memcpy(&h, head.data(), sizeof(h));
      // Messages of another group generation (a late frame to a reused address) are not ours.
      if (h.magic != kMagic || h.group_id != spec().id || h.src >= size()) continue;
      const size_t src = h.src;
      switch (h.kind) {
        case Kind::abort:
          if (!peer_abort_) {
            peer_abort_ = make_error(Errc::worker_failed,
                                     "the group was aborted by rank " + std::to_string(src) + " (" +
                                         std::string(static_cast<const char*>(body.data()), body.size()) + ")");
          }
          break;
        case Kind::bye: left_[src] = true; break;
        case Kind::hello:
          hello_size_[src] = h.step;
          stash_[src].push_back({h, std::move(body)});
          break;
        default: stash_[src].push_back({h, std::move(body)}); break;
      }
    }
  }

  struct Inbound {
    Header h;
    zmq::message_t body;
  };

  zmq::context_t ctx_;
  zmq::socket_t inbox_;
  std::vector<zmq::socket_t> out_;                              // [size]; none at rank()
  std::vector<zmq::socket_t> monitors_;                         // [size]: disconnect events of out_
  std::vector<std::optional<Clock::time_point>> disconnected_;  // [size]: when out_'s connection ended
  std::vector<std::deque<Inbound>> stash_;                      // [size]: received, not yet taken
  std::vector<bool> left_;                                      // [size]: said goodbye
  std::vector<uint32_t> hello_size_ = std::vector<uint32_t>(static_cast<size_t>(size()), 0);
  std::vector<uint64_t> sent_, received_;  // [size]: send/recv message numbers per peer
  uint64_t op_seq_ = 0;
  std::optional<Error> peer_abort_;
  bool broken_ = false;
  std::atomic<bool> abort_requested_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> join_zmq_group(const GroupSpec& spec, int rank) {
  ACTORD_TRY_STATUS(validate(spec));
  const std::string prefix =
      describe(spec) + ", rank " + std::to_string(rank) + " of " + std::to_string(spec.size) + ", join: ";
  if (rank < 0 || rank >= spec.size) return make_error(Errc::invalid_argument, prefix + "no such rank");
  auto comm = std::make_unique<ZmqCommunicator>(spec, rank);
  if (Status st = comm->join(); !st.ok()) return make_error(st.error().code, prefix + st.error().message);
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace actord::coll
