// The harness of the collectives tests (collectives_test.cpp, collectives_failure_test.cpp): inputs whose float sums
// depend on their order and the rank-order references, the operation cases every backend runs, rank reports, and
// ranks run as threads or forked processes that share a mapping with the parent.
//
// Forked ranks write their results into a shared anonymous mapping; the parent compares them. Every child is
// reaped; one still running at the limit is killed and fails the test. No timings are asserted.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "free_port.hpp"
#include "comms/collectives/group_factory.hpp"
#include "comms/collectives/phase_board.hpp"
#include "comms/collectives/shm_segment.hpp"
#include "test_util.hpp"

using namespace actord;
using namespace actord::coll;
using namespace std::chrono_literals;

namespace {

// ---- inputs and references ---------------------------------------------------------------------------------------

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Element i of rank r's input: signs and exponents (2^-8 .. 2^8) vary, so float sums depend on their order.
inline float value(int rank, size_t i, uint32_t salt) {
  const uint64_t h = mix((uint64_t{salt} << 44) ^ (uint64_t(static_cast<uint32_t>(rank)) << 36) ^ i);
  const float mantissa = 1.0f + static_cast<float>(h & 0xffffff) / 16777216.0f;
  const float v = std::ldexp(mantissa, static_cast<int>((h >> 24) % 17) - 8);
  return ((h >> 41) & 1) ? -v : v;
}

inline std::vector<float> values(int rank, size_t n, uint32_t salt, size_t offset = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, offset + i, salt);
  return v;
}

// The fixed-order reference: (((x0 + x1) + x2) + ...) in float.
inline std::vector<float> rank_order_sum(int size, size_t n, uint32_t salt, size_t offset = 0) {
  std::vector<float> s = values(0, n, salt, offset);
  for (int r = 1; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) s[i] += value(r, offset + i, salt);
  }
  return s;
}

inline std::vector<size_t> offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> o(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) o[i + 1] = o[i] + counts[i];
  return o;
}

// Where two float vectors first differ bit for bit, or -1.
inline long first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<long>(std::min(a.size(), b.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<long>(i);
  }
  return -1;
}

// ---- the operations every backend runs ---------------------------------------------------------------------------

struct OpCase {
  std::string name;
  std::function<Status(Communicator&, std::vector<float>& out)> run;
  std::function<std::vector<float>(int rank, int size)> expect;
};

// all_to_all's send counts from rank r to rank j: zeros, odd sizes, and one block of several slots.
inline size_t a2a_count(int r, int j, int n) {
  if (r == 0 && j == n - 1) return 5000;
  if ((r + 2 * j) % 3 == 0) return 0;
  return static_cast<size_t>((r * 131 + j * 71 + 5) % 1500);
}

// Built the same way in every rank and in the parent: sizes are chosen against the small slots, frames and rings
// of test_spec() (4 KiB), so most operations go in several pieces.
inline std::vector<OpCase> op_cases(int n) {
  std::vector<OpCase> cases;
  for (size_t len : {0, 1, 3, 1000, 1003, 5000, 20011}) {
    const uint32_t salt = 100 + static_cast<uint32_t>(len);
    cases.push_back({"all_reduce " + std::to_string(len),
                     [=](Communicator& c, std::vector<float>& out) {
                       out = values(c.rank(), len, salt);
                       return c.all_reduce(out);
                     },
                     [=](int, int size) { return rank_order_sum(size, len, salt); }});
  }
  for (size_t total : {0, 5, 2503, 9001}) {
    const uint32_t salt = 200 + static_cast<uint32_t>(total);
    cases.push_back({"all_gather " + std::to_string(total),
                     [=](Communicator& c, std::vector<float>& out) {
                       const auto counts = balanced_counts(total, c.size());
                       const auto in = values(c.rank(), counts[static_cast<size_t>(c.rank())], salt);
                       out.assign(total, -1.0f);
                       return c.all_gather(in, out);
                     },
                     [=](int, int size) {
                       std::vector<float> all;
                       for (int j = 0; j < size; ++j) {
                         const auto part = values(j, balanced_counts(total, size)[static_cast<size_t>(j)], salt);
                         all.insert(all.end(), part.begin(), part.end());
                       }
                       return all;
                     }});
  }
  auto gather_counts = [](int size) {
    std::vector<size_t> c(static_cast<size_t>(size));
    for (int j = 0; j < size; ++j) c[static_cast<size_t>(j)] = j == 1 ? 0 : static_cast<size_t>(700 * j + 13);
    return c;
  };
  cases.push_back({"all_gather by counts",
                   [=](Communicator& c, std::vector<float>& out) {
                     const auto counts = gather_counts(c.size());
                     const auto in = values(c.rank(), counts[static_cast<size_t>(c.rank())], 300);
                     out.assign(offsets(counts).back(), -1.0f);
                     return c.all_gather(in, out, counts);
                   },
                   [=](int, int size) {
                     std::vector<float> all;
                     for (int j = 0; j < size; ++j) {
                       const auto part = values(j, gather_counts(size)[static_cast<size_t>(j)], 300);
                       all.insert(all.end(), part.begin(), part.end());
                     }
                     return all;
                   }});
  auto byte_of = [](int rank, size_t i) { return static_cast<uint8_t>(mix(static_cast<uint64_t>(rank) * 7919 + i)); };
  cases.push_back({"all_gather_bytes odd sizes",
                   [=](Communicator& c, std::vector<float>& out) {
                     std::vector<size_t> counts(static_cast<size_t>(c.size()));
                     for (int j = 0; j < c.size(); ++j) counts[static_cast<size_t>(j)] = 5 + 3 * static_cast<size_t>(j);
                     std::vector<std::byte> in(counts[static_cast<size_t>(c.rank())]);
                     for (size_t i = 0; i < in.size(); ++i) in[i] = std::byte{byte_of(c.rank(), i)};
                     std::vector<std::byte> got(offsets(counts).back());
                     Status st = c.all_gather_bytes(in, got, counts);
                     out.clear();
                     for (std::byte b : got) out.push_back(static_cast<float>(std::to_integer<int>(b)));
                     return st;
                   },
                   [=](int, int size) {
                     std::vector<float> all;
                     for (int j = 0; j < size; ++j) {
                       for (size_t i = 0; i < 5 + 3 * static_cast<size_t>(j); ++i) all.push_back(byte_of(j, i));
                     }
                     return all;
                   }});
  for (size_t total : {0, 7, 3001, 12000}) {
    const uint32_t salt = 400 + static_cast<uint32_t>(total);
    cases.push_back({"reduce_scatter " + std::to_string(total),
                     [=](Communicator& c, std::vector<float>& out) {
                       const auto in = values(c.rank(), total, salt);
                       out.assign(balanced_counts(total, c.size())[static_cast<size_t>(c.rank())], -1.0f);
                       return c.reduce_scatter(in, out);
                     },
                     [=](int r, int size) {
                       const auto counts = balanced_counts(total, size);
                       return rank_order_sum(size, counts[static_cast<size_t>(r)], salt,
                                             offsets(counts)[static_cast<size_t>(r)]);
                     }});
  }
  cases.push_back({"reduce_scatter by counts",
                   [=](Communicator& c, std::vector<float>& out) {
                     const auto counts = gather_counts(c.size());
                     const auto in = values(c.rank(), offsets(counts).back(), 500);
                     out.assign(counts[static_cast<size_t>(c.rank())], -1.0f);
                     return c.reduce_scatter(in, out, counts);
                   },
                   [=](int r, int size) {
                     const auto counts = gather_counts(size);
                     return rank_order_sum(size, counts[static_cast<size_t>(r)], 500,
                                           offsets(counts)[static_cast<size_t>(r)]);
                   }});
  // all_to_all: the output starts with the receive counts, then the received blocks.
  cases.push_back({"all_to_all",
                   [=](Communicator& c, std::vector<float>& out) {
                     std::vector<size_t> send(static_cast<size_t>(c.size()));
                     for (int j = 0; j < c.size(); ++j) send[static_cast<size_t>(j)] = a2a_count(c.rank(), j, c.size());
                     const auto in = values(c.rank(), offsets(send).back(), 600);
                     std::vector<float> got;
                     std::vector<size_t> recv;
                     Status st = c.all_to_all(in, send, got, recv);
                     out.assign(recv.begin(), recv.end());
                     out.insert(out.end(), got.begin(), got.end());
                     return st;
                   },
                   [=](int r, int size) {
                     std::vector<float> expect;
                     for (int j = 0; j < size; ++j) expect.push_back(static_cast<float>(a2a_count(j, r, size)));
                     for (int j = 0; j < size; ++j) {
                       size_t off = 0;
                       for (int k = 0; k < r; ++k) off += a2a_count(j, k, size);
                       const auto block = values(j, a2a_count(j, r, size), 600, off);
                       expect.insert(expect.end(), block.begin(), block.end());
                     }
                     return expect;
                   }});
  cases.push_back({"all_to_all nothing to send",
                   [=](Communicator& c, std::vector<float>& out) {
                     std::vector<size_t> send(static_cast<size_t>(c.size()), 0);
                     std::vector<float> got{1.0f};
                     std::vector<size_t> recv;
                     Status st = c.all_to_all({}, send, got, recv);
                     out.assign(recv.begin(), recv.end());
                     out.insert(out.end(), got.begin(), got.end());
                     return st;
                   },
                   [=](int, int size) { return std::vector<float>(static_cast<size_t>(size), 0.0f); }});
  // A pipeline: each rank receives from the one before and sends to the one after; then the last sends to the
  // first. Messages larger than a ring buffer stream through it.
  for (size_t m : {0, 7, 3000}) {
    const uint32_t salt = 700 + static_cast<uint32_t>(m);
    cases.push_back({"send/recv chain " + std::to_string(m),
                     [=](Communicator& c, std::vector<float>& out) -> Status {
                       out.clear();
                       if (c.size() == 1) return Status::success();
                       if (c.rank() > 0) {
                         std::vector<float> got(m);
                         ACTORD_TRY_STATUS(c.recv(c.rank() - 1, got));
                         out.insert(out.end(), got.begin(), got.end());
                       }
                       if (c.rank() < c.size() - 1) ACTORD_TRY_STATUS(c.send(c.rank() + 1, values(c.rank(), m, salt)));
                       if (c.rank() == c.size() - 1) ACTORD_TRY_STATUS(c.send(0, values(c.rank(), m + 1, salt)));
                       if (c.rank() == 0) {
                         std::vector<float> got(m + 1);
                         ACTORD_TRY_STATUS(c.recv(c.size() - 1, got));
                         out.insert(out.end(), got.begin(), got.end());
                       }
                       return Status::success();
                     },
                     [=](int r, int size) {
                       if (size == 1) return std::vector<float>{};
                       if (r == 0) return values(size - 1, m + 1, salt);
                       return values(r - 1, m, salt);
                     }});
  }
  cases.push_back({"two sends before their recvs",
                   [=](Communicator& c, std::vector<float>& out) -> Status {
                     out.clear();
                     if (c.size() == 1) return Status::success();
                     if (c.rank() == 0) {
                       ACTORD_TRY_STATUS(c.send(1, values(0, 10, 800)));
                       ACTORD_TRY_STATUS(c.send(1, values(0, 20, 801)));
                     } else if (c.rank() == 1) {
                       std::vector<float> a(10), b(20);
                       ACTORD_TRY_STATUS(c.recv(0, a));
                       ACTORD_TRY_STATUS(c.recv(0, b));
                       out = a;
                       out.insert(out.end(), b.begin(), b.end());
                     }
                     return Status::success();
                   },
                   [=](int r, int size) {
                     if (size == 1 || r != 1) return std::vector<float>{};
                     auto a = values(0, 10, 800);
                     const auto b = values(0, 20, 801);
                     a.insert(a.end(), b.begin(), b.end());
                     return a;
                   }});
  cases.push_back({"barrier",
                   [=](Communicator& c, std::vector<float>& out) -> Status {
                     out.clear();
                     ACTORD_TRY_STATUS(c.barrier());
                     return c.barrier();
                   },
                   [=](int, int) { return std::vector<float>{}; }});
  return cases;
}

// ---- what a rank reports -----------------------------------------------------------------------------------------

struct Report {
  bool written = false;
  std::map<std::string, std::vector<float>> values;
  std::vector<std::string> errors;
  std::vector<int> error_codes;

  void fail(const std::string& what, const Error& e) {
    errors.push_back(what + ": " + e.message);
    error_codes.push_back(static_cast<int>(e.code));
  }
};

// A report in a byte region (a forked rank's slot): values, then errors; false if it does not fit.
inline bool serialize(const Report& r, std::byte* at, size_t cap) {
  size_t pos = 0;
  auto put = [&](const void* p, size_t n) {
    if (pos + n > cap) return false;
    std::memcpy(at + pos, p, n);
    pos += n;
    return true;
  };
  auto put_u64 = [&](uint64_t v) { return put(&v, sizeof(v)); };
  auto put_str = [&](const std::string& s) { return put_u64(s.size()) && put(s.data(), s.size()); };
  bool ok = put_u64(1) && put_u64(r.values.size());
  for (const auto& [name, v] : r.values) ok = ok && put_str(name) && put_u64(v.size()) && put(v.data(), v.size() * 4);
  ok = ok && put_u64(r.errors.size());
  for (size_t i = 0; i < r.errors.size(); ++i)
    ok = ok && put_str(r.errors[i]) && put_u64(static_cast<uint64_t>(r.error_codes[i]));
  return ok;
}

inline Report deserialize(const std::byte* at) {
  Report r;
  size_t pos = 0;
  auto get_u64 = [&] {
    uint64_t v;
    std::memcpy(&v, at + pos, sizeof(v));
    pos += sizeof(v);
    return v;
  };
  auto get_str = [&] {
    const size_t n = get_u64();
    std::string s(reinterpret_cast<const char*>(at + pos), n);
    pos += n;
    return s;
  };
  if (get_u64() != 1) return r;
  r.written = true;
  for (uint64_t i = 0, n = get_u64(); i < n; ++i) {
    std::string name = get_str();
    std::vector<float> v(get_u64());
    std::memcpy(v.data(), at + pos, v.size() * 4);
    pos += v.size() * 4;
    r.values[name] = std::move(v);
  }
  for (uint64_t i = 0, n = get_u64(); i < n; ++i) {
    r.errors.push_back(get_str());
    r.error_codes.push_back(static_cast<int>(get_u64()));
  }
  return r;
}

// ---- running ranks as threads or forked processes ----------------------------------------------------------------

constexpr int kMaxRanks = 8;
constexpr size_t kReportBytes = size_t{4} << 20;

// What ranks share with the parent (and each other) besides the group: a progress counter each.
struct Shared {
  std::atomic<int> progress[kMaxRanks];
};

// A MAP_SHARED anonymous mapping: the Shared header, then one report slot per rank.
class SharedArea {
 public:
  SharedArea() {
    mem_ = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(mem_ != MAP_FAILED);
    new (mem_) Shared();
  }
  ~SharedArea() { munmap(mem_, bytes()); }
  Shared& shared() { return *static_cast<Shared*>(mem_); }
  std::byte* slot(int r) { return static_cast<std::byte*>(mem_) + 4096 + static_cast<size_t>(r) * kReportBytes; }

 private:
  static size_t bytes() { return 4096 + kMaxRanks * kReportBytes; }
  void* mem_;
};

// How the ranks of a test run and meet: the backend, and whether each rank is a forked process or a thread.
struct Fleet {
  std::string label;
  Backend backend;
  bool processes;
  bool ipc = false;  // zmq: ipc:// endpoints instead of tcp:// loopback
};

const Fleet kThreads{"in-process threads", Backend::in_process, false};
const Fleet kShm{"shared memory, processes", Backend::shared_memory, true};
const Fleet kTcp{"zmq tcp loopback, processes", Backend::zmq, true};
const Fleet kIpc{"zmq ipc, processes", Backend::zmq, true, true};

using test::free_port;  // free_port.hpp

// The spec of a group of `size` ranks on `fleet`, with 4 KiB slots, rings and frames (operations go in pieces).
inline GroupSpec test_spec(const Fleet& fleet, const std::filesystem::path& ipc_folder, uint64_t id, int size,
                    std::chrono::milliseconds timeout = 10s) {
  GroupSpec spec;
  spec.name = "test/" + std::to_string(id);
  spec.id = id;
  spec.size = size;
  spec.placement = fleet.backend == Backend::in_process ? Placement::thread : Placement::process;
  spec.backend = fleet.backend;
  spec.timeout = timeout;
  spec.engine_pid = getpid();
  spec.slot_bytes = 4096;
  spec.channel_bytes = 4096;
  spec.piece_bytes = 4096;
  if (fleet.backend == Backend::zmq) {
    if (fleet.ipc) {
      spec.endpoints = ipc_endpoints(ipc_folder, id, size);
    } else {
      spec.endpoints.assign(static_cast<size_t>(size), "tcp://127.0.0.1:*");
      spec.endpoints[0] = "tcp://127.0.0.1:" + std::to_string(free_port());
    }
  }
  return spec;
}

// Opens a rank's communicator: join_group, or for the in-process backend its share of a group made once for all
// the threads of the test.
class Opener {
 public:
  Result<std::unique_ptr<Communicator>> open(const GroupSpec& spec, int rank) {
    if (resolve_backend(spec) != Backend::in_process) return join_group(spec, rank);
    std::lock_guard<std::mutex> lock(mu_);
    auto& made = groups_[spec.id];
    if (made.empty()) {
      auto comms = create_local_group(spec);
      if (!comms.ok()) return comms.error();
      made = std::move(*comms);
    }
    return std::move(made[static_cast<size_t>(rank)]);
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, std::vector<std::unique_ptr<Communicator>>> groups_;
};

using RankBody = std::function<void(int rank, Opener& opener, Report& report, Shared& shared)>;
// Runs in the parent while forked ranks run (e.g. to kill one).
using Watcher = std::function<void(const std::vector<pid_t>& pids, Shared& shared)>;

inline std::vector<Report> run_ranks(const Fleet& fleet, int n, const RankBody& body, const Watcher& watch = {},
                              std::chrono::seconds limit = 60s) {
  REQUIRE(n <= kMaxRanks);
  SharedArea area;
  std::vector<Report> reports(static_cast<size_t>(n));
  if (!fleet.processes) {
    Opener opener;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        body(r, opener, reports[static_cast<size_t>(r)], area.shared());
        reports[static_cast<size_t>(r)].written = true;
      });
    }
    for (auto& t : threads) t.join();
    return reports;
  }
  std::fflush(nullptr);
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      Opener opener;
      Report report;
      body(r, opener, report, area.shared());
      _exit(serialize(report, area.slot(r), kReportBytes) ? 0 : 2);
    }
    pids.push_back(pid);
  }
  if (watch) watch(pids, area.shared());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> done(static_cast<size_t>(n), false);
  std::vector<int> status(static_cast<size_t>(n), 0);
  bool hung = false;
  for (size_t left = static_cast<size_t>(n); left > 0;) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      if (waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      hung = true;
      for (size_t r = 0; r < pids.size(); ++r) {
        if (done[r]) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status[r], 0);
        done[r] = true;
      }
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
  INFO(fleet.label << ": " << n << " ranks");
  CHECK_FALSE(hung);
  for (int r = 0; r < n; ++r) {
    const int st = status[static_cast<size_t>(r)];
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) reports[static_cast<size_t>(r)] = deserialize(area.slot(r));
  }
  return reports;
}

// Runs every op case on the group `spec`, recording each output, stopping at the first error.
inline void exercise(Communicator& comm, Report& report) {
  for (const OpCase& c : op_cases(comm.size())) {
    std::vector<float> out;
    Status st = c.run(comm, out);
    if (!st.ok()) {
      report.fail(c.name, st.error());
      return;
    }
    report.values[c.name] = std::move(out);
  }
}

inline void check_exercise(const Fleet& fleet, int n, const std::vector<Report>& reports) {
  INFO(fleet.label << ", " << n << " ranks");
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    const Report& rep = reports[static_cast<size_t>(r)];
    REQUIRE(rep.written);
    for (const std::string& e : rep.errors) FAIL_CHECK(e);
    for (const OpCase& c : op_cases(n)) {
      INFO(c.name);
      const auto it = rep.values.find(c.name);
      REQUIRE(it != rep.values.end());
      const std::vector<float> expect = c.expect(r, n);
      const long at = first_difference(it->second, expect);
      INFO("sizes " << it->second.size() << " / " << expect.size() << ", first difference at " << at);
      CHECK(at == -1);
    }
  }
}

inline void exercise_fleet(const Fleet& fleet) {
  test::TempDir dir;
  for (int n = 1; n <= 4; ++n) {
    const GroupSpec spec = test_spec(fleet, dir.path(), static_cast<uint64_t>(10 + n), n);
    auto reports = run_ranks(fleet, n, [&](int rank, Opener& opener, Report& report, Shared&) {
      auto comm = opener.open(spec, rank);
      if (!comm.ok()) return report.fail("join", comm.error());
      exercise(**comm, report);
    });
    check_exercise(fleet, n, reports);
  }
}

inline std::vector<std::string> leftover_segments() {
  std::vector<std::string> found;
  const std::string prefix = "actord-coll-" + std::to_string(getpid()) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) found.push_back(e.path().filename());
  }
  return found;
}

}  // namespace
