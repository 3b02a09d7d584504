// The shared memory link between an engine and a worker process on its machine (comms/collectives/shm_link,
// actors/shm_envelope): messages arrive whole and in order across processes, including messages larger than the
// ring (streamed through it) and empty frames; a receiver with nothing to read returns nothing at its wait; a sender
// facing a full ring gives up when its peer is gone or at its deadline, never hangs; a wrong size or a missing
// segment is an Error naming it; malformed envelopes are Errors, not aborts; the heartbeat counter; and the segment's
// name is gone once both ends mapped it. Forked peers are reaped; none outlives its test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/shm_envelope.hpp"
#include "comms/collectives/shm_link.hpp"

using namespace actord;
using namespace actord::coll;
using namespace std::chrono_literals;

namespace {

constexpr size_t kRing = 64 * 1024;  // small, so that large messages must stream through it

std::string link_name(const std::string& tag) { return ShmLink::segment_name(getpid(), "test-" + tag); }

// Message i: (i % 5) frames, frame f of (i * 37 + f * 1000) % limit bytes (some empty), byte k = i + f + k.
std::vector<std::vector<uint8_t>> message(size_t i, size_t limit) {
  std::vector<std::vector<uint8_t>> frames(i % 5);
  for (size_t f = 0; f < frames.size(); ++f) {
    frames[f].resize((i * 37 + f * 1000) % limit);
    for (size_t k = 0; k < frames[f].size(); ++k) frames[f][k] = static_cast<uint8_t>(i + f + k);
  }
  return frames;
}

Status send_frames(ShmLink& link, const std::vector<std::vector<uint8_t>>& frames,
                   ShmLink::Clock::duration limit = 10s, const ShmLink::GiveUp& give_up = {}) {
  std::vector<std::span<const std::byte>> spans;
  for (const auto& f : frames) spans.push_back(std::as_bytes(std::span(f)));
  return link.send(spans, ShmLink::Clock::now() + limit, give_up);
}

// Runs body in a forked child; its exit status is body's result (0 = success). The child never returns.
template <class Body>
pid_t fork_peer(Body&& body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  return pid;
}

int reap(pid_t pid) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(1ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("shm link: messages of every size cross processes whole and in order, both ways", "[shm_link]") {
  const std::string name = link_name("echo");
  auto engine = ShmLink::create(name, kRing);
  REQUIRE(engine.ok());
  constexpr size_t kMessages = 400;
  // The worker end echoes every message back, frame for frame.
  const pid_t peer = fork_peer([&] {
    auto worker = ShmLink::open(name, ShmLink::Clock::now() + 5s, kRing);
    if (!worker.ok()) return 2;
    worker->unlink();
    for (size_t i = 0; i < kMessages; ++i) {
      auto got = worker->recv(10s, {});
      if (!got.ok() || !got->has_value()) return 3;
      if (!send_frames(*worker, **got).ok()) return 4;
    }
    return 0;
  });
  // Sizes up to 3x the ring: those stream through it while the peer drains it. Replies are read on a thread of their
  // own, as the engine reads its worker's (one sending and one receiving thread per end), while this one sends them
  // all: both rings fill and both ends wait on each other's progress.
  size_t received = 0, wrong = 0;
  std::thread replies([&] {
    for (; received < kMessages; ++received) {
      auto got = engine->recv(10s, {});
      if (!got.ok() || !got->has_value()) return;
      if (**got != message(received, 3 * kRing)) ++wrong;
    }
  });
  size_t sent = 0;
  while (sent < kMessages && send_frames(*engine, message(sent, 3 * kRing)).ok()) ++sent;
  replies.join();
  CHECK(sent == kMessages);
  CHECK(received == kMessages);
  CHECK(wrong == 0);
  CHECK(reap(peer) == 0);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + name));  // the worker unlinked it once mapped
}

TEST_CASE("shm link: recv returns nothing at its wait when no message began", "[shm_link]") {
  auto engine = ShmLink::create(link_name("idle"), kRing);
  REQUIRE(engine.ok());
  const auto t0 = ShmLink::Clock::now();
  auto got = engine->recv(30ms, {});
  REQUIRE(got.ok());
  CHECK_FALSE(got->has_value());
  CHECK(ShmLink::Clock::now() - t0 >= 30ms);
  engine->unlink();
}

TEST_CASE("shm link: a sender facing a full ring gives up when its peer is gone, or at its deadline", "[shm_link]") {
  auto engine = ShmLink::create(link_name("full"), kRing);
  REQUIRE(engine.ok());
  engine->unlink();
  const std::vector<std::vector<uint8_t>> big{std::vector<uint8_t>(kRing * 2, 7)};  // nobody reads it
  SECTION("the give-up test says the peer is gone") {
    int asked = 0;
    auto sent = send_frames(*engine, big, 10s, [&]() -> std::optional<Error> {
      if (++asked < 3) return std::nullopt;
      return make_error(Errc::worker_failed, "peer ended");
    });
    REQUIRE_FALSE(sent.ok());
    CHECK(sent.error().message == "peer ended");
  }
  SECTION("the deadline passes") {
    auto sent = send_frames(*engine, big, 50ms);
    REQUIRE_FALSE(sent.ok());
    CHECK(sent.error().code == Errc::worker_failed);
    CHECK_THAT(sent.error().message, Catch::Contains("the peer takes nothing"));
  }
}

TEST_CASE("shm link: opening a missing segment, or one of another size, is an Error naming it", "[shm_link]") {
  const std::string missing = link_name("missing");
  auto none = ShmLink::open(missing, ShmLink::Clock::now() + 50ms, kRing);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains(missing));

  const std::string name = link_name("sized");
  auto engine = ShmLink::create(name, kRing);
  REQUIRE(engine.ok());
  auto other = ShmLink::open(name, ShmLink::Clock::now() + 1s, 4 * kRing);
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error().message, Catch::Contains(name));
  engine->unlink();
}

TEST_CASE("shm link: too many frames are refused before anything is written", "[shm_link]") {
  auto engine = ShmLink::create(link_name("frames"), kRing);
  REQUIRE(engine.ok());
  engine->unlink();
  const std::vector<std::vector<uint8_t>> many((1u << 16) + 1);
  auto sent = send_frames(*engine, many);
  REQUIRE_FALSE(sent.ok());
  CHECK(sent.error().code == Errc::invalid_argument);
}

TEST_CASE("shm link: the worker end's heartbeat counter is seen by the engine end", "[shm_link]") {
  const std::string name = link_name("beats");
  auto engine = ShmLink::create(name, kRing);
  REQUIRE(engine.ok());
  auto worker = ShmLink::open(name, ShmLink::Clock::now() + 1s, kRing);
  REQUIRE(worker.ok());
  worker->unlink();
  const uint64_t before = engine->beats();
  for (int i = 0; i < 3; ++i) worker->beat();
  CHECK(engine->beats() == before + 3);
}

TEST_CASE("shm envelopes: kind, capnp bytes and bulk frames arrive as sent - malformed ones are Errors",
          "[shm_link]") {
  const std::string name = link_name("envelope");
  auto engine = ShmLink::create(name, kRing);
  REQUIRE(engine.ok());
  auto worker = ShmLink::open(name, ShmLink::Clock::now() + 1s, kRing);
  REQUIRE(worker.ok());
  worker->unlink();

  wire_msg body;
  body.bytes = std::vector<uint8_t>(48, 3);
  body.bulk.push_back(std::vector<uint8_t>(3 * kRing, 9));  // a KV export larger than the ring
  body.bulk.push_back({});
  std::optional<Result<std::optional<Envelope>>> got;
  std::thread reader([&] { got = recv_envelope(*worker, 10s, {}); });
  REQUIRE(send_envelope(*engine, wire::MessageKind::IMPORT_KV, body, ShmLink::Clock::now() + 10s, {}).ok());
  reader.join();
  REQUIRE(got->ok());
  REQUIRE((*got)->has_value());
  const Envelope& env = ***got;
  CHECK(env.kind == wire::MessageKind::IMPORT_KV);
  CHECK(env.body.bytes == body.bytes);
  CHECK(env.body.bulk == body.bulk);

  // A message that is not an envelope: one frame (no body), or a kind frame of the wrong size.
  REQUIRE(send_frames(*engine, {std::vector<uint8_t>(4, 0)}).ok());
  auto one = recv_envelope(*worker, 1s, {});
  REQUIRE_FALSE(one.ok());
  CHECK(one.error().code == Errc::parse_error);
  CHECK_THAT(one.error().message, Catch::Contains("with 1 frames"));
  REQUIRE(send_frames(*engine, {std::vector<uint8_t>(2, 0), std::vector<uint8_t>(8, 0)}).ok());
  auto bad_kind = recv_envelope(*worker, 1s, {});
  REQUIRE_FALSE(bad_kind.ok());
  CHECK(bad_kind.error().code == Errc::parse_error);
}
