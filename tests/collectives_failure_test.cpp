// Collectives (comms/collectives/) when things go wrong: a peer that dies, leaves or hangs mid-operation gives an
// Error within the timeout (not a hang); abort from another thread; mismatched calls; arguments and group specs
// refused naming the field; no shared memory segment left behind, and those of dead engines removed.
#include "collectives_harness.hpp"

TEST_CASE("collectives: a peer process killed or stopped mid-operation gives the others an Error, not a hang",
          "[collectives]") {
  // SIGKILL: noticed through the peer's end (a pidfd, a closed connection); SIGSTOP: at the timeout.
  for (const int sig : {SIGKILL, SIGSTOP}) {
    for (const Fleet& fleet : {kShm, kTcp}) {
      test::TempDir dir;
      const GroupSpec spec = test_spec(fleet, dir.path(), sig == SIGKILL ? 31 : 32, 3, 1500ms);
      auto reports = run_ranks(
          fleet, 3,
          [&](int rank, Opener& opener, Report& report, Shared& shared) {
            auto comm = opener.open(spec, rank);
            if (!comm.ok()) return report.fail("join", comm.error());
            std::vector<float> data(20000);
            for (int i = 0;; ++i) {
              data = values(rank, data.size(), 1);
              if (Status st = (*comm)->all_reduce(data); !st.ok()) {
                report.fail("all_reduce", st.error());
                shared.progress[rank].store(-1);
                return;
              }
              shared.progress[rank].store(i + 1);
            }
          },
          [&](const std::vector<pid_t>& pids, Shared& shared) {
            // Every rank has done a few all_reduces, so rank 1 stops somewhere inside one of the loop's operations.
            auto wait_for = [&](auto&& cond) {
              const auto until = std::chrono::steady_clock::now() + 30s;
              while (std::chrono::steady_clock::now() < until && !cond()) std::this_thread::sleep_for(1ms);
            };
            wait_for([&] {
              return shared.progress[0].load() >= 3 && shared.progress[1].load() >= 3 && shared.progress[2].load() >= 3;
            });
            kill(pids[1], sig);
            if (sig == SIGSTOP) {  // once the others gave up, end it
              wait_for([&] { return shared.progress[0].load() == -1 && shared.progress[2].load() == -1; });
              kill(pids[1], SIGKILL);
            }
          });
      INFO(fleet.label << (sig == SIGKILL ? ", killed" : ", stopped"));
      CHECK_FALSE(reports[1].written);
      for (int r : {0, 2}) {
        const Report& rep = reports[static_cast<size_t>(r)];
        REQUIRE(rep.written);
        REQUIRE(rep.errors.size() == 1);
        INFO(rep.errors[0]);
        CHECK(rep.errors[0].find(describe(spec)) != std::string::npos);
        CHECK(rep.error_codes[0] == static_cast<int>(Errc::worker_failed));
        if (sig == SIGKILL) {
          // Each survivor noticed rank 1's death itself or heard of it from the other.
          CHECK(rep.errors[0].find("rank 1") != std::string::npos);
        } else {
          // Whoever waited for rank 1 gave up at the timeout; the other maybe on a rank waiting for it.
          CHECK(rep.errors[0].find("within 1500 ms") != std::string::npos);
        }
      }
    }
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("collectives: a thread rank that leaves or hangs gives the others an Error", "[collectives]") {
  for (const bool leaves : {true, false}) {
    INFO((leaves ? "rank 1 destroys its communicator" : "rank 1 stops calling"));
    test::TempDir dir;
    const GroupSpec spec = test_spec(kThreads, dir.path(), 41, 3, 300ms);
    std::atomic<int> finished{0};
    auto reports = run_ranks(kThreads, 3, [&](int rank, Opener& opener, Report& report, Shared&) {
      auto comm = opener.open(spec, rank);
      if (!comm.ok()) return report.fail("join", comm.error());
      for (int i = 0; i < 1000; ++i) {
        if (rank == 1 && i == 3) {
          if (leaves) {
            comm->reset();
          } else {
            while (finished.load() < 2) std::this_thread::sleep_for(1ms);  // hangs until the others gave up
          }
          return;
        }
        std::vector<float> data = values(rank, 5000, 2);
        if (Status st = (*comm)->all_reduce(data); !st.ok()) {
          report.fail("all_reduce", st.error());
          ++finished;
          return;
        }
      }
      ++finished;
    });
    for (int r : {0, 2}) {
      const Report& rep = reports[static_cast<size_t>(r)];
      REQUIRE(rep.errors.size() == 1);
      INFO(rep.errors[0]);
      CHECK(rep.errors[0].find(describe(spec)) != std::string::npos);
      CHECK(rep.error_codes[0] == static_cast<int>(Errc::worker_failed));
    }
    const std::string expected = leaves ? "rank 1 left the group" : "rank 1 did not arrive within 300 ms";
    const bool named = reports[0].errors[0].find(expected) != std::string::npos ||
                       reports[2].errors[0].find(expected) != std::string::npos;
    INFO(reports[0].errors[0] << " | " << reports[2].errors[0]);
    CHECK(named);
  }
}

TEST_CASE("collectives: abort from another thread ends a wait that would otherwise last the whole timeout",
          "[collectives]") {
  // Rank 1 never calls; the timeout is a minute, so only the abort can end rank 0's all_reduce within the test.
  for (const Fleet& fleet : {kThreads, Fleet{"shared memory, threads", Backend::shared_memory, false},
                             Fleet{"zmq tcp, threads", Backend::zmq, false}}) {
    INFO(fleet.label);
    test::TempDir dir;
    const GroupSpec spec = test_spec(fleet, dir.path(), 51, 2, 60s);
    Opener opener;
    std::unique_ptr<Communicator> c0, c1;
    std::thread joiner([&] {
      auto c = opener.open(spec, 1);
      REQUIRE(c.ok());
      c1 = std::move(*c);
    });
    auto c = opener.open(spec, 0);
    joiner.join();
    REQUIRE(c.ok());
    c0 = std::move(*c);
    std::thread coordinator([&] {
      std::this_thread::sleep_for(50ms);
      c0->abort("the coordinator tears the group down");
    });
    std::vector<float> data(100, 1.0f);
    Status st = c0->all_reduce(data);
    coordinator.join();
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message.find("the coordinator tears the group down") != std::string::npos);
    // The group stays broken.
    Status again = c0->barrier();
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().message.find("the group is broken") != std::string::npos);
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("collectives: ranks that call different operations or sizes all get an Error", "[collectives]") {
  for (const Fleet& fleet : {kThreads, kShm, kTcp}) {
    test::TempDir dir;
    const GroupSpec spec = test_spec(fleet, dir.path(), 61, 2, 5s);
    const GroupSpec spec2 = test_spec(fleet, dir.path(), 62, 2, 5s);
    auto reports = run_ranks(fleet, 2, [&](int rank, Opener& opener, Report& report, Shared&) {
      {
        auto comm = opener.open(spec, rank);
        if (!comm.ok()) return report.fail("join", comm.error());
        std::vector<float> data(rank == 0 ? 1000 : 1200, 1.0f);
        Status st = (*comm)->all_reduce(data);
        if (!st.ok()) report.fail("sizes", st.error());
      }
      auto comm = opener.open(spec2, rank);
      if (!comm.ok()) return report.fail("join", comm.error());
      std::vector<float> data(64, 1.0f);
      Status st = rank == 0 ? (*comm)->all_reduce(data) : (*comm)->barrier();
      if (!st.ok()) report.fail("kinds", st.error());
    });
    INFO(fleet.label);
    for (const Report& rep : reports) {
      REQUIRE(rep.written);
      REQUIRE(rep.errors.size() == 2);
      CHECK(rep.errors[0].rfind("sizes: " + describe(spec), 0) == 0);
      CHECK(rep.errors[1].rfind("kinds: " + describe(spec2), 0) == 0);
      INFO(rep.errors[0] << " | " << rep.errors[1]);
      // The rank that spotted the mismatch says so; its peer may only learn of the abort.
      CHECK((rep.error_codes[0] == static_cast<int>(Errc::invalid_argument) ||
             rep.errors[0].find("aborted by rank") != std::string::npos));
    }
    const bool spotted = reports[0].error_codes[0] == static_cast<int>(Errc::invalid_argument) ||
                         reports[1].error_codes[0] == static_cast<int>(Errc::invalid_argument);
    CHECK(spotted);
  }
}

TEST_CASE("collectives: arguments that do not add up are refused before anything is sent, naming the operation",
          "[collectives]") {
  GroupSpec spec;
  spec.name = "solo";
  spec.id = 7;
  auto comms = create_local_group(spec);
  REQUIRE(comms.ok());
  Communicator& c = *(*comms)[0];
  std::vector<float> in(10), out(9);
  const std::vector<size_t> counts{10};
  Status st = c.all_gather(in, out, counts);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == Errc::invalid_argument);
  CHECK(st.error().message ==
        "collective group 'solo' (id 7), rank 0 of 1, all_gather: counts add up to 10, out holds 9");
  Status next = c.barrier();
  REQUIRE_FALSE(next.ok());
  CHECK(next.error().message.find("the group is broken") != std::string::npos);

  auto fresh = create_local_group(spec);
  REQUIRE(fresh.ok());
  Status peer = (*fresh)[0]->send(0, std::span<const float>(in));
  REQUIRE_FALSE(peer.ok());
  CHECK(peer.error().message.find("send: no peer rank 0") != std::string::npos);
}

TEST_CASE("collectives: a bad group spec is refused naming the field", "[collectives]") {
  GroupSpec spec;
  spec.name = "tp";
  spec.id = 3;
  spec.size = 0;
  CHECK(validate(spec).error().message == "collective group 'tp' (id 3): size: must be in [1, 4096], got 0");
  spec.size = 3;
  spec.placement = Placement::node;
  spec.endpoints = {"tcp://10.0.0.1:5000", "tcp://10.0.0.2:*"};
  CHECK(validate(spec).error().message == "collective group 'tp' (id 3): endpoints: 2 entries for 3 ranks");
  spec.endpoints = {"tcp://10.0.0.1:*", "tcp://10.0.0.2:*", "tcp://10.0.0.3:*"};
  CHECK(validate(spec).error().message.find("endpoints[0]: rank 0's port must be given") != std::string::npos);
  spec.endpoints[0] = "udp://10.0.0.1:5000";
  CHECK(validate(spec).error().message.find("endpoints[0]: must start with tcp:// or ipc://") != std::string::npos);
  spec.endpoints[0] = "tcp://10.0.0.1:5000";
  CHECK(validate(spec).ok());
  CHECK(resolve_backend(spec) == Backend::zmq);

  spec.placement = Placement::process;
  CHECK(resolve_backend(spec) == Backend::shared_memory);
  CHECK(validate(spec).error().message.find("engine_pid:") != std::string::npos);
  spec.engine_pid = getpid();
  spec.slot_bytes = 100;
  CHECK(validate(spec).error().message.find("slot_bytes: must be in [4096, 1 GiB], got 100") != std::string::npos);
  spec.slot_bytes = 4096;
  CHECK(validate(spec).ok());
  spec.backend = Backend::in_process;
  CHECK(validate(spec).error().message.find("backend: in_process needs placement thread") != std::string::npos);

  // The wrong factory for the backend.
  spec.backend = Backend::automatic;
  auto local = create_local_group(spec);
  REQUIRE_FALSE(local.ok());
  CHECK(local.error().message.find("call join_group in each") != std::string::npos);
  spec.placement = Placement::thread;
  auto joined = join_group(spec, 0);
  REQUIRE_FALSE(joined.ok());
  CHECK(joined.error().message.find("call create_local_group") != std::string::npos);
}

TEST_CASE("collectives: a shared memory group whose ranks never come fails at its timeout and leaves no segment",
          "[collectives]") {
  test::TempDir dir;
  const GroupSpec spec = test_spec(kShm, dir.path(), 71, 3, 200ms);
  auto comm = join_group(spec, 0);
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.error().code == Errc::worker_failed);
  CHECK(comm.error().message == describe(spec) + ", rank 0 of 3, join: rank(s) 1, 2 did not join within 200 ms");
  CHECK(leftover_segments().empty());
  // A rank whose rank 0 never comes.
  auto late = join_group(test_spec(kShm, dir.path(), 72, 2, 100ms), 1);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().message.find("was not created in time") != std::string::npos);
}

TEST_CASE("collectives: segments left by dead engines are removed, those of live ones kept", "[collectives]") {
  const pid_t dead = [] {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    return child;
  }();
  const std::string stale = "/actord-coll-" + std::to_string(dead) + "-5";
  const std::string live = "/actord-coll-" + std::to_string(getpid()) + "-99";
  auto a = ShmSegment::create(stale, 4096);
  auto b = ShmSegment::create(live, 4096);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(ShmSegment::remove_stale() >= 1);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + stale));
  CHECK(std::filesystem::exists("/dev/shm" + live));
  b->unlink();
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + live));
  // What a process ending on a signal does: its own names go, others stay.
  auto own = ShmSegment::create("/actord-coll-" + std::to_string(getpid()) + "-link-x", 4096);
  auto other = ShmSegment::create("/actord-coll-" + std::to_string(getppid()) + "-98", 4096);
  REQUIRE(own.ok());
  REQUIRE(other.ok());
  CHECK(ShmSegment::remove_all_of(getpid()) == 1);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + own->name()));
  CHECK(std::filesystem::exists("/dev/shm" + other->name()));
  other->unlink();
}

TEST_CASE("collectives: a peer process that cannot be watched (no descriptor left) is not taken for dead",
          "[collectives]") {
  // Only pidfd_open's ESRCH means the peer is gone; EMFILE leaves it to the timeout.
  const pid_t peer = fork();
  REQUIRE(peer >= 0);
  if (peer == 0) {
    pause();
    _exit(0);
  }
  auto judge = [](pid_t pid, bool exhaust) {  // in a child: 0 if the board takes `pid` for alive, 1 if for dead
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) {
      AbortState abort;
      RankState ranks[2];
      ranks[1].pid.store(pid);
      PhaseBoard board(&abort, ranks, 2, 0, 1000ms);
      if (exhaust) {
        const rlimit few{64, 64};
        setrlimit(RLIMIT_NOFILE, &few);
        while (dup(0) >= 0) {
        }
      }
      board.watch_peers();
      _exit(board.failure(1).has_value() ? 1 : 0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(judge(peer, false) == 0);
  CHECK(judge(peer, true) == 0);
  kill(peer, SIGKILL);
  waitpid(peer, nullptr, 0);
  CHECK(judge(peer, false) == 1);
}
