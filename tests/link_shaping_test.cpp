// The link model (groups[].link) against a real shaped link: two ranks of a ZeroMQ group, one in a network namespace
// of its own, joined by a veth pair whose two directions a token bucket (`tc qdisc tbf`) caps at 100 Mbit/s; a
// 1 MB all-reduce there takes about what the link model predicts for 12.5 MB/s (a ring of 2 moves 1 MB per rank). Needs
// root, iproute2 and tc; skipped with a message otherwise.
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "comms/collectives/group_factory.hpp"
#include "netns_util.hpp"

using namespace actord;
using namespace actord::coll;

namespace {

constexpr size_t kFloats = 250'000;  // 1 MB
constexpr int kRounds = 3;

// A port free on `ip` now.
int free_port_on(const std::string& ip) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : 0;
}

// The median time of kRounds all-reduces of kFloats on `comm`, in ms (both ranks run the same).
double median_all_reduce_ms(Communicator& comm) {
  std::vector<double> ms;
  std::vector<float> data(kFloats, 1.0f);
  for (int i = 0; i < kRounds; ++i) {
    if (!comm.barrier().ok()) return -1;
    const auto t0 = std::chrono::steady_clock::now();
    if (!comm.all_reduce(data).ok()) return -1;
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

TEST_CASE("link model: a veth pair shaped by tc tbf to 100 Mbit/s takes about the modelled 12.5 MB/s",
          "[collectives][link_model][node]") {
  test::NetNamespace node;
  if (!node.ok || !node.shape("100mbit")) {
    WARN("skipped: needs root, iproute2 and tc (tbf) to make and shape a veth pair");
    return;
  }
  GroupSpec spec;
  spec.name = "shaped";
  spec.id = 1;
  spec.size = 2;
  spec.placement = Placement::node;
  spec.backend = Backend::zmq;
  spec.timeout = std::chrono::seconds(20);
  const int port = free_port_on(node.here_ip);
  REQUIRE(port > 0);
  spec.endpoints = {"tcp://" + node.here_ip + ":" + std::to_string(port), "tcp://" + node.there_ip + ":*"};
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {  // rank 1, in the namespace
    const int ns = open(("/var/run/netns/" + node.ns).c_str(), O_RDONLY);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(3);
    auto comm = join_group(spec, 1);
    if (!comm) _exit(2);
    const bool ok = median_all_reduce_ms(**comm) >= 0;
    comm->reset();
    _exit(ok ? 0 : 1);
  }
  auto comm = join_group(spec, 0);
  REQUIRE(comm.ok());
  const double shaped = median_all_reduce_ms(**comm);
  comm->reset();
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  GroupSpec modelled;
  modelled.name = "modelled";
  modelled.id = 2;
  modelled.size = 2;
  modelled.link_bytes_per_second = 12'500'000;
  auto threads = create_local_group(modelled);
  REQUIRE(threads.ok());
  double model = 0;
  std::thread other([&] { median_all_reduce_ms(*(*threads)[1]); });
  model = median_all_reduce_ms(*(*threads)[0]);
  other.join();
  WARN("1 MB all-reduce, 2 ranks: veth shaped by tbf at 100 Mbit/s " << shaped << " ms, link model at 12.5 MB/s "
                                                                       << model << " ms");
  REQUIRE(shaped > 0);
  REQUIRE(model > 0);
  CHECK(model >= 80.0);  // 2 (N - 1) / N x 1 MB at 12.5 MB/s
  CHECK(shaped / model > 0.7);
  CHECK(shaped / model < 1.5);
}
