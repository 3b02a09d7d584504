// The shared memory link between an engine and each worker process on its machine leaves nothing behind: mapped
// while both run, gone when the engine ends (normally, on a failed start, on SIGTERM, SIGINT or SIGHUP of the command
// line, and on SIGKILL, where the worker dies with it); a name a killed engine left in /dev/shm is removed at the
// next start; and a worker inherits no descriptor of its engine.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli_util.hpp"
#include "comms/collectives/shm_link.hpp"
#include "engine_test_util.hpp"
#include "process_util.hpp"

using namespace actord;
namespace fs = std::filesystem;

namespace {

pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

// `actord generate` on the two-process quickstart, long enough to be caught running.
pid_t start_generate(const fs::path& out) {
  return test::start_actord({"generate", "configs/quickstart-2proc.yaml", "--prompt-ids", "1", "--n", "16",
                             "--max-tokens", "400", "--ignore-eos", "--temperature", "0.8", "--seed", "1"},
                            out);
}

// Its worker runs and their link is up.
bool serving_through_link(pid_t engine) {
  return !test::worker_processes_of(engine).empty() && test::link_mapped_by_both(engine);
}

}  // namespace

TEST_CASE("an engine's worker link is mapped while it runs and gone when it ends - a failed start leaves none",
          "[link][process]") {
  {
    auto engine = Engine::start(test::quickstart("configs/quickstart-2proc.yaml"), test::engine_options());
    REQUIRE(engine.ok());
    const auto links = test::worker_links_of(getpid());
    CHECK(links.size() == 2);  // mapped by the engine and by its worker; the name was unlinked once both had it
    for (const auto& l : links) CHECK_THAT(l, Catch::EndsWith("replica-0-worker-0 (deleted)"));
  }
  CHECK(test::worker_links_of(getpid()).empty());
  auto bad = Engine::start(test::quickstart("configs/quickstart-2proc.yaml", {"model.load_format=dummy",
                                                                              "scheduler.policy=nonesuch"}),
                           test::engine_options());
  REQUIRE_FALSE(bad.ok());
  CHECK(test::worker_links_of(getpid()).empty());
}

TEST_CASE("a link name a killed engine left behind is removed by the next engine start", "[link][process]") {
  const pid_t gone = dead_pid();
  const std::string left = coll::ShmLink::segment_name(gone, "replica/0/worker/0");
  REQUIRE(coll::ShmLink::create(left).ok());  // as if the engine died before its worker mapped the link
  REQUIRE(fs::exists("/dev/shm" + left));
  auto engine = Engine::start(test::quickstart("configs/quickstart-2proc.yaml"), test::engine_options());
  REQUIRE(engine.ok());
  CHECK_FALSE(fs::exists("/dev/shm" + left));
}

TEST_CASE("generate ended by SIGTERM, SIGINT or SIGKILL leaves no link and no worker", "[link][process][cli]") {
  for (int sig : {SIGTERM, SIGINT, SIGKILL}) {
    INFO("signal " << sig);
    test::TempDir out;
    const pid_t pid = start_generate(out.path());
    REQUIRE(test::eventually([&] { return serving_through_link(pid); }, std::chrono::seconds(20)));
    REQUIRE(kill(pid, sig) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == sig);
    // The worker notices its parent's end (within its 200 ms receive wait) and exits; its mapping goes with it.
    CHECK(test::eventually([&] { return test::worker_processes_of(pid).empty(); }, std::chrono::seconds(5)));
    CHECK(test::eventually([&] { return test::worker_links_of(pid).empty(); }, std::chrono::seconds(5)));
    for (pid_t w : test::worker_processes_of(pid)) kill(w, SIGKILL);  // never leave one behind, even on failure
  }
}

TEST_CASE("serve drains on SIGTERM, SIGINT and SIGHUP, exits 0 and leaves no link", "[link][process][cli]") {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    INFO("signal " << sig);
    test::TempDir out;
    const pid_t pid = test::start_actord({"serve", "configs/quickstart-2proc.yaml", "--port", "0"}, out.path());
    // Serving (its first line says so), as an operator would see it before stopping it.
    REQUIRE(test::eventually([&] {
      std::ifstream printed(out.path() / "out");
      std::string line;
      return std::getline(printed, line) && line.rfind("actord: serving ", 0) == 0;
    }, std::chrono::seconds(20)));
    CHECK(serving_through_link(pid));
    REQUIRE(kill(pid, sig) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    if (WIFEXITED(status)) CHECK(WEXITSTATUS(status) == 0);
    CHECK(test::worker_processes_of(pid).empty());  // reaped before it exited
    CHECK(test::worker_links_of(pid).empty());
  }
}

TEST_CASE("a worker process inherits no descriptor of its engine beyond stdin, stdout and stderr",
          "[link][process]") {
  test::TempDir base;
  // An inheritable descriptor, as a lock held by whoever started the engine (`flock ... actord serve`) would be.
  const fs::path marker = base.path() / "lock";
  test::write_file(marker, "");
  FILE* held = std::fopen(marker.c_str(), "r");
  REQUIRE(held != nullptr);
  auto engine = Engine::start(test::quickstart("configs/quickstart-2proc.yaml"), test::engine_options());
  REQUIRE(engine.ok());
  const auto workers = test::worker_processes_of(getpid());
  REQUIRE(workers.size() == 1);
  const pid_t worker = workers[0];
  std::vector<std::string> targets;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(worker) + "/fd")) {
    std::error_code ec;
    targets.push_back(fs::read_symlink(fd.path(), ec).string());
  }
  INFO("worker " << worker << " holds: " << [&] { std::string all; for (auto& t : targets) all += t + " "; return all; }());
  CHECK(std::find(targets.begin(), targets.end(), marker.string()) == targets.end());
  std::fclose(held);
}
