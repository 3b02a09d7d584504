// All-reduce latency and bandwidth of the CPU collectives backends (comms/collectives/) between two ranks, from
// 4 KB to 64 MB: shared memory, ZeroMQ over ipc and over tcp loopback between two forked processes, and the
// in-process backend between two threads for reference.
//
//   actord_collectives_bench [backend ...]     backends: threads shm zmq-ipc zmq-tcp (default: all)
//
// Each size: a few warm-up calls, then 5 rounds of back-to-back all_reduce calls (as many as fit in ~0.2 s, the
// same count on both ranks) between barriers; the table shows the median round's time per call (µs) and the
// bandwidth size / time (GB/s, the buffer each rank contributes and gets back). Every backend uses its default
// slot and frame sizes (1 MiB).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comms/collectives/group_factory.hpp"

using namespace actord;
using namespace actord::coll;

namespace {

using Clock = std::chrono::steady_clock;

const std::vector<size_t> kSizes = {size_t{4} << 10, size_t{16} << 10, size_t{64} << 10, size_t{256} << 10,
                                    size_t{1} << 20, size_t{4} << 20,  size_t{16} << 20, size_t{64} << 20};
constexpr int kRounds = 5;

struct Cell {
  double us = -1;  // median time per call; < 0: not measured
  double min_us = -1;
};

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Prints why a call failed; whether it succeeded.
bool ok(const Status& st) {
  if (!st.ok()) std::fprintf(stderr, "%s\n", st.error().message.c_str());
  return st.ok();
}

// Times all_reduce at every size on one rank; rank 0 writes the cells.
bool measure(Communicator& comm, Cell* cells) {
  for (size_t s = 0; s < kSizes.size(); ++s) {
    std::vector<float> data(kSizes[s] / sizeof(float), 0.0f);
    std::vector<float> count(1, 0.0f);
    const int warmup = kSizes[s] >= (size_t{16} << 20) ? 2 : 10;
    for (int i = 0; i < warmup; ++i) {
      if (!ok(comm.all_reduce(data))) return false;
    }
    // One timed call on rank 0 decides how many calls make ~0.2 s; the sum tells rank 1.
    const auto t0 = Clock::now();
    if (!ok(comm.all_reduce(data))) return false;
    const double one = std::chrono::duration<double>(Clock::now() - t0).count();
    count[0] =
        comm.rank() == 0 ? static_cast<float>(std::clamp(static_cast<int>(0.2 / std::max(one, 1e-7)), 3, 20000)) : 0.0f;
    if (!ok(comm.all_reduce(count))) return false;
    const int calls = static_cast<int>(count[0]);
    std::vector<double> per_call;
    for (int round = 0; round < kRounds; ++round) {
      if (!ok(comm.barrier())) return false;
      const auto start = Clock::now();
      for (int i = 0; i < calls; ++i) {
        if (!ok(comm.all_reduce(data))) return false;
      }
      per_call.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls);
    }
    std::sort(per_call.begin(), per_call.end());
    if (comm.rank() == 0) cells[s] = {per_call[kRounds / 2], per_call[0]};
  }
  return true;
}

struct Backend_ {
  std::string label;
  Backend backend;
  bool ipc = false;
};

// Runs both ranks of one backend (threads, or two forked processes) and returns rank 0's cells.
std::vector<Cell> run(const Backend_& b, const std::filesystem::path& folder, uint64_t id) {
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* cells = static_cast<Cell*>(mem);
  for (size_t s = 0; s < kSizes.size(); ++s) cells[s] = Cell{};
  GroupSpec spec;
  spec.name = "bench/" + b.label;
  spec.id = id;
  spec.size = 2;
  spec.backend = b.backend;
  spec.placement = b.backend == Backend::in_process ? Placement::thread : Placement::process;
  spec.timeout = std::chrono::seconds(60);
  spec.engine_pid = getpid();
  if (b.backend == Backend::zmq) {
    spec.endpoints =
        b.ipc ? ipc_endpoints(folder, id, 2)
              : std::vector<std::string>{"tcp://127.0.0.1:" + std::to_string(free_port()), "tcp://127.0.0.1:*"};
  }
  if (b.backend == Backend::in_process) {
    auto comms = create_local_group(spec);
    if (!comms.ok()) {
      std::fprintf(stderr, "%s\n", comms.error().message.c_str());
    } else {
      std::thread peer([&] { measure(*(*comms)[1], cells); });
      measure(*(*comms)[0], cells);
      peer.join();
    }
  } else {
    std::fflush(nullptr);
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        auto comm = join_group(spec, r);
        if (!comm.ok()) {
          std::fprintf(stderr, "%s\n", comm.error().message.c_str());
          _exit(1);
        }
        const bool measured = measure(**comm, cells);
        comm->reset();  // flushes what this rank still has queued for its peer
        _exit(measured ? 0 : 1);
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  }
  std::vector<Cell> out(cells, cells + kSizes.size());
  munmap(mem, 4096);
  return out;
}

std::string size_name(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes >> 10) + " KB";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Backend_> all = {{"threads", Backend::in_process},
                                     {"shm", Backend::shared_memory},
                                     {"zmq-ipc", Backend::zmq, true},
                                     {"zmq-tcp", Backend::zmq, false}};
  std::vector<Backend_> chosen;
  for (int i = 1; i < argc; ++i) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const Backend_& b) { return b.label == argv[i]; });
    if (it == all.end()) {
      std::fprintf(stderr, "unknown backend '%s' (threads, shm, zmq-ipc, zmq-tcp)\n", argv[i]);
      return 2;
    }
    chosen.push_back(*it);
  }
  if (chosen.empty()) chosen = all;
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("actord-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  std::vector<std::vector<Cell>> results;
  uint64_t id = 1;
  for (const Backend_& b : chosen) results.push_back(run(b, folder, id++));
  std::filesystem::remove_all(folder);

  std::printf("all_reduce, 2 ranks (threads: one process; the others: two processes), median of %d rounds\n", kRounds);
  std::printf("%-8s", "size");
  for (const Backend_& b : chosen) std::printf(" | %-20s", (b.label + " us  GB/s").c_str());
  std::printf("\n");
  for (size_t s = 0; s < kSizes.size(); ++s) {
    std::printf("%-8s", size_name(kSizes[s]).c_str());
    for (const auto& r : results) {
      if (r[s].us < 0) {
        std::printf(" | %-20s", "failed");
      } else {
        std::printf(" | %9.1f  %8.2f ", r[s].us, static_cast<double>(kSizes[s]) / (r[s].us * 1e3));
      }
    }
    std::printf("\n");
  }
  return 0;
}
