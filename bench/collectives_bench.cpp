// Collectives latency between two ranks of each CPU backend (comms/collectives/): shared memory, ZeroMQ over ipc and
// over tcp loopback between two forked processes, and the in-process backend between two threads for reference.
//
//   actord_collectives_bench [--moe [HIDDEN]] [backend ...]   backends: threads shm zmq-ipc zmq-tcp (default: all)
//
// Default: all_reduce from 4 KB to 64 MB (µs per call and bandwidth: the buffer each rank contributes and gets back).
// --moe: one MoE layer's expert-parallel exchange at ep 2 (TransformerModel::experts_over_ranks): each rank owns half
// of a step's tokens, routes each to 2 of 8 experts (4 per rank, uniformly at random, the same draw on both ranks),
// sends the rows of HIDDEN floats (default 2048) of its tokens to the experts' ranks, each rank's block headed by its
// 4 slots' row counts (all_to_all) and gets the outputs back (a second all_to_all); from 1 to 4096 tokens per step,
// beside the all_reduce of the whole [tokens, HIDDEN] that tensor-parallel experts pay instead. (With attention
// lanes a rank owns its lane's tokens instead of half the step's: the same exchange.)
// Each case: a few warm-up calls, then 5 rounds of back-to-back calls (as many as fit in ~0.2 s, the same count on
// both ranks) between barriers; the median round's time per call. Every backend uses its default slot and frame
// sizes (1 MiB).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
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

// What is timed: `cases` operations, case i run by op(comm, i) on each rank.
struct Workload {
  size_t cases = 0;
  std::function<Status(Communicator&, size_t)> op;
  std::function<bool(size_t)> heavy;  // fewer warm-up calls
};

// Times every case of `w` on one rank; rank 0 writes the cells.
bool measure(Communicator& comm, const Workload& w, Cell* cells) {
  for (size_t s = 0; s < w.cases; ++s) {
    std::vector<float> count(1, 0.0f);
    const int warmup = w.heavy(s) ? 2 : 10;
    for (int i = 0; i < warmup; ++i) {
      if (!ok(w.op(comm, s))) return false;
    }
    // One timed call on rank 0 decides how many calls make ~0.2 s; the sum tells rank 1.
    const auto t0 = Clock::now();
    if (!ok(w.op(comm, s))) return false;
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
        if (!ok(w.op(comm, s))) return false;
      }
      per_call.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls);
    }
    std::sort(per_call.begin(), per_call.end());
    if (comm.rank() == 0) cells[s] = {per_call[kRounds / 2], per_call[0]};
  }
  return true;
}

Workload all_reduce_sizes() {
  auto data = std::make_shared<std::vector<float>>();
  return {kSizes.size(),
          [data](Communicator& comm, size_t s) {
            data->resize(kSizes[s] / sizeof(float));
            return comm.all_reduce(*data);
          },
          [](size_t s) { return kSizes[s] >= (size_t{16} << 20); }};
}

const std::vector<size_t> kMoeTokens = {1, 4, 16, 64, 256, 1024, 4096};
constexpr int kExperts = 8, kTopK = 2;

// Case 2i: the EP dispatch + combine of kMoeTokens[i] tokens; case 2i + 1: the all_reduce of [tokens, hidden].
Workload moe_exchange(int hidden) {
  struct State {
    std::vector<float> send, received, returned, whole;
    std::vector<size_t> send_counts, recv_counts, back_counts;
    size_t prepared = SIZE_MAX;
  };
  auto states = std::make_shared<std::vector<State>>(2);  // one per rank (the threads backend shares this)
  return {2 * kMoeTokens.size(),
          [states, hidden](Communicator& comm, size_t c) -> Status {
            State* st = &(*states)[size_t(comm.rank())];
            const size_t tokens = kMoeTokens[c / 2];
            if (c % 2 == 1) {
              st->whole.resize(tokens * size_t(hidden));
              return comm.all_reduce(st->whole);
            }
            if (st->prepared != c) {  // this rank's rows for each rank, as the model builds them
              std::mt19937 rng(static_cast<uint32_t>(tokens));
              st->send_counts.assign(2, 0);
              const size_t first = balanced_offset(tokens, 2, comm.rank()),
                           count = balanced_count(tokens, 2, comm.rank());
              for (size_t t = 0; t < tokens; ++t) {
                int chosen[kTopK] = {-1, -1};
                for (int k = 0; k < kTopK; ++k) {
                  do chosen[k] = static_cast<int>(rng() % kExperts);
                  while (k > 0 && chosen[k] == chosen[0]);
                }
                if (t < first || t >= first + count) continue;
                for (int e : chosen) st->send_counts[size_t(e / (kExperts / 2))] += size_t(hidden);
              }
              for (size_t& count : st->send_counts) count += kExperts / 2;  // the header: a row count per slot
              st->send.assign(st->send_counts[0] + st->send_counts[1], 1.0f);
              st->prepared = c;
            }
            ACTORD_TRY_STATUS(comm.all_to_all(st->send, st->send_counts, st->received, st->recv_counts));
            return comm.all_to_all(st->received, st->recv_counts, st->returned, st->back_counts);
          },
          [](size_t c) { return kMoeTokens[c / 2] >= 1024; }};
}

struct Backend_ {
  std::string label;
  Backend backend;
  bool ipc = false;
};

// Runs both ranks of one backend (threads, or two forked processes) and returns rank 0's cells.
std::vector<Cell> run(const Backend_& b, const Workload& w, const std::filesystem::path& folder, uint64_t id) {
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* cells = static_cast<Cell*>(mem);
  for (size_t s = 0; s < w.cases; ++s) cells[s] = Cell{};
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
      std::thread peer([&] { measure(*(*comms)[1], w, cells); });
      measure(*(*comms)[0], w, cells);
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
        const bool measured = measure(**comm, w, cells);
        comm->reset();  // flushes what this rank still has queued for its peer
        _exit(measured ? 0 : 1);
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  }
  std::vector<Cell> out(cells, cells + w.cases);
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
  int moe_hidden = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--moe") {
      moe_hidden = 2048;
      if (i + 1 < argc && std::isdigit(static_cast<unsigned char>(argv[i + 1][0]))) moe_hidden = std::atoi(argv[++i]);
      continue;
    }
    const auto it = std::find_if(all.begin(), all.end(), [&](const Backend_& b) { return b.label == argv[i]; });
    if (it == all.end()) {
      std::fprintf(stderr, "unknown backend '%s' (threads, shm, zmq-ipc, zmq-tcp)\n", argv[i]);
      return 2;
    }
    chosen.push_back(*it);
  }
  if (chosen.empty()) chosen = all;
  const Workload workload = moe_hidden > 0 ? moe_exchange(moe_hidden) : all_reduce_sizes();
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("actord-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  std::vector<std::vector<Cell>> results;
  uint64_t id = 1;
  for (const Backend_& b : chosen) results.push_back(run(b, workload, folder, id++));
  std::filesystem::remove_all(folder);

  auto cell = [](const Cell& c, const char* format, double value) {
    if (c.us < 0) return std::printf(" | %-20s", "failed");
    return std::printf(format, c.us, value);
  };
  if (moe_hidden > 0) {
    std::printf("MoE layer exchange at ep 2, hidden %d, top-%d of %d experts (threads: one process; the others: two "
                "processes), median of %d rounds: EP dispatch + combine (two all_to_all) vs the all_reduce TP "
                "experts need\n", moe_hidden, kTopK, kExperts, kRounds);
    std::printf("%-7s", "tokens");
    for (const Backend_& b : chosen) std::printf(" | %-26s", (b.label + " EP us   TP all_reduce us").c_str());
    std::printf("\n");
    for (size_t i = 0; i < kMoeTokens.size(); ++i) {
      std::printf("%-7zu", kMoeTokens[i]);
      for (const auto& r : results) {
        if (r[2 * i].us < 0 || r[2 * i + 1].us < 0) std::printf(" | %-26s", "failed");
        else std::printf(" | %9.1f  %15.1f ", r[2 * i].us, r[2 * i + 1].us);
      }
      std::printf("\n");
    }
    return 0;
  }
  std::printf("all_reduce, 2 ranks (threads: one process; the others: two processes), median of %d rounds\n", kRounds);
  std::printf("%-8s", "size");
  for (const Backend_& b : chosen) std::printf(" | %-20s", (b.label + " us  GB/s").c_str());
  std::printf("\n");
  for (size_t s = 0; s < kSizes.size(); ++s) {
    std::printf("%-8s", size_name(kSizes[s]).c_str());
    for (const auto& r : results) cell(r[s], " | %9.1f  %8.2f ", static_cast<double>(kSizes[s]) / (r[s].us * 1e3));
    std::printf("\n");
  }
  return 0;
}
