// Two-batch overlap inside one rank: several micro-batches' forward passes run at once as fibers of the calling
// thread (ucontext: a stack of their own each), switched only where one of them would wait for its peers. Every wait
// loop of the collectives asks the thread's hook (coll::WaitHook, set for the run) to run the other micro-batches
// instead of blocking, so one micro-batch's communication overlaps another's compute, and the switch costs a
// context swap, not a thread wake-up. Two never compute at once, so the rank's backend (its thread pool, its
// memory) sees one caller at a time, and no thread of the runner's own competes for the rank's cores. Each
// micro-batch needs collective groups of its own (its peers' operations pair with its own).
//
// Scheduling: round robin over the micro-batches not done; a paused one re-checks its operation when its turn
// comes, so whichever can go on computes (no fixed order: an operation that needs no wait keeps computing, and
// waiting only while others can run cannot deadlock, as the ranks' turns may differ). When every micro-batch
// only checks and pauses again for a while, the thread yields its core, then sleeps in slices of 50 us (after 2 ms)
// and 500 us (after 20 ms). A
// micro-batch left alone (the others done) blocks in its waits as without overlap.
#pragma once

#include <ucontext.h>

#include <chrono>
#include <exception>
#include <functional>
#include <vector>

#include "comms/collectives/communicator.hpp"

namespace actord {

class OverlapRunner {
 public:
  // `micro_batches`: how many run at once (2 or more), each with a stack of kStackBytes (reserved, backed as used).
  explicit OverlapRunner(int micro_batches = 2);
  ~OverlapRunner();
  OverlapRunner(const OverlapRunner&) = delete;
  OverlapRunner& operator=(const OverlapRunner&) = delete;
  int micro_batches() const { return static_cast<int>(fibers_.size()); }
  // Runs every task (as many as micro_batches()) to its end, tasks[0] first, switching at their collectives' waits;
  // an exception a task throws is rethrown here once all have ended. One run at a time.
  void run(const std::vector<std::function<void()>>& tasks);

  static constexpr size_t kStackBytes = size_t{8} << 20;

 private:
  struct Fiber {
    ucontext_t context{};
    void* mapping = nullptr;  // guard page + stack
    const std::function<void()>* task = nullptr;
    bool done = true;
    std::exception_ptr error;
  };
  class Hook final : public coll::WaitHook {
   public:
    explicit Hook(OverlapRunner& runner) : runner_(runner) {}
    bool pause() override { return runner_.pause(); }

   private:
    OverlapRunner& runner_;
  };
  static void entry(unsigned int high, unsigned int low);  // makecontext passes ints: the runner's address
  bool pause();
  void unmap_stacks();  // each fiber's mapping made so far
  void pace(std::chrono::steady_clock::time_point resumed, bool finished);

  ucontext_t scheduler_{};
  std::vector<Fiber> fibers_;
  int current_ = -1;  // the fiber running, -1: the scheduler
  int alive_ = 0;     // fibers not done in this run
  std::chrono::steady_clock::time_point idle_since_{};  // since when every resume only checked and paused (or epoch)
  Hook hook_{*this};
};

}  // namespace actord
