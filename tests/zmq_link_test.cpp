// comms/zmq_link: envelopes over a ZeroMQ PUSH/PULL pair in one process. A signal delivered while a receiver waits
// (a profiler's or a fuzzer's interval timer, SIGCHLD) must neither end the wait early nor throw out of it.

#include <signal.h>
#include <sys/time.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <zmq.hpp>

#include "comms/capnp_codec.hpp"
#include "comms/zmq_link.hpp"

using namespace actord;
using namespace std::chrono_literals;

namespace {

struct Pair {
  zmq::context_t context{1};
  zmq::socket_t in{context, zmq::socket_type::pull};
  zmq::socket_t out{context, zmq::socket_type::push};
  Pair() {
    in.bind("inproc://zmq-link-test");
    out.connect("inproc://zmq-link-test");
  }
};

wire_msg cancel_body(uint64_t id) {
  return build<wire::CancelRequest>([&](wire::CancelRequest::Builder b) { b.setCorrelationId(id); });
}

std::atomic<int> g_alarms{0};
void count_alarm(int) { g_alarms.fetch_add(1, std::memory_order_relaxed); }

// An interval timer raising SIGALRM every `period` on this process while it lives, with a handler installed without
// SA_RESTART, so blocking calls see EINTR.
class AlarmEvery {
 public:
  explicit AlarmEvery(std::chrono::microseconds period) {
    struct sigaction action {};
    action.sa_handler = count_alarm;
    sigemptyset(&action.sa_mask);
    sigaction(SIGALRM, &action, &previous_);
    itimerval timer{};
    timer.it_interval.tv_usec = static_cast<long>(period.count());
    timer.it_value.tv_usec = static_cast<long>(period.count());
    setitimer(ITIMER_REAL, &timer, nullptr);
  }
  ~AlarmEvery() {
    itimerval off{};
    setitimer(ITIMER_REAL, &off, nullptr);
    sigaction(SIGALRM, &previous_, nullptr);
  }

 private:
  struct sigaction previous_ {};
};

}  // namespace

TEST_CASE("zmq link: an envelope's kind, target, body and bulk frames arrive as sent", "[zmq_link]") {
  Pair pair;
  wire_msg body = cancel_body(42);
  body.bulk = {{1, 2, 3}, {}, std::vector<uint8_t>(70000, 7)};
  REQUIRE(send_envelope(pair.out, wire::MessageKind::HEARTBEAT, "scheduler", body));
  auto got = recv_envelope(pair.in, 1000);
  REQUIRE(got);
  REQUIRE(got->has_value());
  const Envelope& env = **got;
  CHECK(env.kind == wire::MessageKind::HEARTBEAT);
  CHECK(env.target == "scheduler");
  CHECK(env.body.bytes == body.bytes);
  CHECK(env.body.bulk == body.bulk);
  WireReader reader(env.body.bytes.data(), env.body.bytes.size());
  CHECK(reader.root<wire::CancelRequest>().getCorrelationId() == 42);
}

TEST_CASE("zmq link: a lone frame or an unreadable header is an Error, and the socket still works", "[zmq_link]") {
  Pair pair;
  pair.out.send(zmq::str_buffer("just one frame"), zmq::send_flags::none);
  auto lone = recv_envelope(pair.in, 1000);
  REQUIRE_FALSE(lone);
  CHECK(lone.error().message.find("without a body frame") != std::string::npos);

  pair.out.send(zmq::str_buffer("not capnp"), zmq::send_flags::sndmore);
  pair.out.send(zmq::str_buffer("body"), zmq::send_flags::none);
  auto garbled = recv_envelope(pair.in, 1000);
  REQUIRE_FALSE(garbled);
  CHECK(garbled.error().message.find("malformed ZeroMQ envelope") != std::string::npos);

  REQUIRE(send_envelope(pair.out, wire::MessageKind::HEARTBEAT, "x", cancel_body(1)));
  auto good = recv_envelope(pair.in, 1000);
  REQUIRE(good);
  CHECK(good->has_value());
}

TEST_CASE("zmq link: signals during a wait neither end it early nor throw out of it", "[zmq_link]") {
  Pair pair;
  g_alarms = 0;
  AlarmEvery alarm(2ms);

  const auto start = std::chrono::steady_clock::now();
  auto none = recv_envelope(pair.in, 150);
  const auto waited = std::chrono::steady_clock::now() - start;
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  CHECK(waited >= 145ms);
  CHECK(g_alarms.load() > 5);  // the wait was interrupted, and resumed

  std::thread sender([&] {
    std::this_thread::sleep_for(60ms);
    send_envelope(pair.out, wire::MessageKind::HEARTBEAT, "late", cancel_body(7));
  });
  auto late = recv_envelope(pair.in, -1);
  sender.join();
  REQUIRE(late);
  REQUIRE(late->has_value());
  CHECK((*late)->target == "late");

  zmq::pollitem_t item{pair.in.handle(), 0, ZMQ_POLLIN, 0};
  CHECK(poll_through_signals(&item, 1, 50ms) == 0);
}
