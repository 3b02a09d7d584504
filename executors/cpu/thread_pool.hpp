// A fixed set of threads that run the parallel parts of a forward pass (GEMMs, attention).
//
// Contract: owned by one worker and driven by one thread at a time (the worker actor's), which also takes part in
// the work: a pool of size N has N - 1 threads of its own. parallel_for(n, fn) calls fn(i) exactly once for each i
// in [0, n) and returns when all calls have returned. The caller never waits for a thread that is not running: if
// the other threads are descheduled (a busy machine), the caller does all the tasks itself. fn must not throw.
// Between calls the threads spin briefly (a step issues many parallel_for calls in a row), then sleep; rest() sends
// them to sleep at once (the step is over: their spinning would take the cores the actors that answer it need).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace actord::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }
  void parallel_for(int n, const std::function<void(int)>& fn);
  // The threads stop spinning and sleep until the next parallel_for (which wakes them as always).
  void rest() { resting_.store(true, std::memory_order_relaxed); }

 private:
  void worker_loop();
  // Claims and runs tasks of generation `gen` until none is left; true if it ran any.
  void run_tasks(uint32_t gen, int n, const std::function<void(int)>* fn);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  // (generation << 32) | next task index: a task is claimed by a compare-and-swap on this word, so a thread that
  // wakes late for an old generation can never claim a task of the current one.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> done_{0};       // tasks of the current generation that have finished
  std::atomic<bool> resting_{false};  // rest() since the last parallel_for: no spinning
  uint32_t generation_ = 0;        // guarded by mutex_
  int n_ = 0;                      // guarded by mutex_
  const std::function<void(int)>* fn_ = nullptr;  // guarded by mutex_
  bool stop_ = false;              // guarded by mutex_
};

}  // namespace actord::cpu
