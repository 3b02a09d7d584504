#include "comms/collectives/futex_sync.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace actord::coll {
namespace {

// FUTEX_WAIT / FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word may be mapped by several processes.
long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, timeout, nullptr, 0);
}

}  // namespace

void signal(SyncWord& w) {
  w.value.fetch_add(1, std::memory_order_seq_cst);
  if (w.sleepers.load(std::memory_order_seq_cst) != 0) futex(&w.value, FUTEX_WAKE, INT_MAX, nullptr);
}

void yield_core() { sched_yield(); }

namespace {
thread_local bool may_yield = true;
}  // namespace

void set_yielding(bool yielding) { may_yield = yielding; }
bool yielding() { return may_yield; }

void wake_all(SyncWord& w) { futex(&w.value, FUTEX_WAKE, INT_MAX, nullptr); }

void sleep_while(SyncWord& w, uint32_t seen, std::chrono::nanoseconds limit) {
  if (limit.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000000);
  futex(&w.value, FUTEX_WAIT, seen, &ts);  // EAGAIN (value changed), EINTR, ETIMEDOUT: the caller re-checks
}

}  // namespace actord::coll
