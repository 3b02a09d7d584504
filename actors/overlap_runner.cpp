#include "actors/overlap_runner.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <thread>

#include "core/host_memory.hpp"
#include "core/status.hpp"

namespace actord {
namespace {

using Clock = std::chrono::steady_clock;

// A resume shorter than this found its operation still waiting: nothing was computed.
constexpr auto kCheckOnly = std::chrono::microseconds(3);
// After this long of checks only, each round yields the core (other threads on it run); after kSleepAfter, it
// sleeps kSleepSlice between rounds (peers that are far behind, or a slow link), and kLongSleepSlice after
// kLongSleepAfter (a pipeline stage waiting out a long prefill upstream wakes 2,000 times a second, not 20,000).
constexpr auto kYieldAfter = std::chrono::microseconds(50);
constexpr auto kSleepAfter = std::chrono::milliseconds(2);
constexpr auto kSleepSlice = std::chrono::microseconds(50);
constexpr auto kLongSleepAfter = std::chrono::milliseconds(20);
constexpr auto kLongSleepSlice = std::chrono::microseconds(500);

}  // namespace

OverlapRunner::OverlapRunner(int micro_batches) : fibers_(static_cast<size_t>(std::max(micro_batches, 2))) {
  const size_t guard = page_bytes();
  for (Fiber& f : fibers_) {
    void* m = mmap(nullptr, guard + kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) {
      unmap_stacks();
      throw std::bad_alloc();
    }
    mprotect(m, guard, PROT_NONE);  // an overflow faults instead of writing past the stack
    f.mapping = m;
  }
}

OverlapRunner::~OverlapRunner() { unmap_stacks(); }

void OverlapRunner::unmap_stacks() {
  for (Fiber& f : fibers_) {
    if (f.mapping) munmap(f.mapping, page_bytes() + kStackBytes);
    f.mapping = nullptr;
  }
}

void OverlapRunner::entry(unsigned int high, unsigned int low) {
  auto* self = reinterpret_cast<OverlapRunner*>((static_cast<uintptr_t>(high) << 32) | static_cast<uintptr_t>(low));
  Fiber& f = self->fibers_[static_cast<size_t>(self->current_)];
  try {
    (*f.task)();
  } catch (...) {
    f.error = std::current_exception();
  }
  f.done = true;
  // Returning resumes uc_link: the scheduler.
}

void OverlapRunner::run(const std::vector<std::function<void()>>& tasks) {
  ACTORD_CHECK_MSG(tasks.size() == fibers_.size(), "OverlapRunner::run: one task per micro-batch");
  const auto self = reinterpret_cast<uintptr_t>(this);
  for (size_t i = 0; i < fibers_.size(); ++i) {
    Fiber& f = fibers_[i];
    f.task = &tasks[i];
    f.done = false;
    f.error = nullptr;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = static_cast<char*>(f.mapping) + page_bytes();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &scheduler_;
    makecontext(&f.context, reinterpret_cast<void (*)()>(&OverlapRunner::entry), 2,
                static_cast<unsigned int>(self >> 32), static_cast<unsigned int>(self & 0xffffffffu));
  }
  alive_ = static_cast<int>(fibers_.size());
  idle_since_ = {};
  coll::set_wait_hook(&hook_);
  for (size_t i = 0; alive_ > 0; i = (i + 1) % fibers_.size()) {
    Fiber& f = fibers_[i];
    if (f.done) continue;
    current_ = static_cast<int>(i);
    const auto resumed = Clock::now();
    swapcontext(&scheduler_, &f.context);  // back when the fiber pauses or ends
    current_ = -1;
    if (f.done) --alive_;
    pace(resumed, f.done);
  }
  coll::set_wait_hook(nullptr);
  for (Fiber& f : fibers_) {
    if (f.error) std::rethrow_exception(f.error);
  }
}

bool OverlapRunner::pause() {
  if (current_ < 0 || alive_ < 2) return false;  // nothing else to run: the caller blocks
  swapcontext(&fibers_[static_cast<size_t>(current_)].context, &scheduler_);
  return true;
}

void OverlapRunner::pace(Clock::time_point resumed, bool finished) {
  const auto now = Clock::now();
  if (finished || now - resumed >= kCheckOnly) {
    idle_since_ = {};
    return;
  }
  if (idle_since_ == Clock::time_point{}) {
    idle_since_ = resumed;
    return;
  }
  const auto idle = now - idle_since_;
  if (idle >= kLongSleepAfter) {
    std::this_thread::sleep_for(kLongSleepSlice);
  } else if (idle >= kSleepAfter) {
    std::this_thread::sleep_for(kSleepSlice);
  } else if (idle >= kYieldAfter) {
    sched_yield();
  }
}

}  // namespace actord
