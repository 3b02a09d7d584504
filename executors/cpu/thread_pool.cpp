#include "executors/cpu/thread_pool.hpp"

#include <immintrin.h>

namespace actord::cpu {

namespace {
constexpr int kSpinIterations = 4000;  // well under a millisecond of pause instructions before sleeping
inline void cpu_relax() { _mm_pause(); }
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) threads_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    ++generation_;
    ticket_.store(static_cast<uint64_t>(generation_) << 32);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_tasks(uint32_t gen, int n, const std::function<void(int)>* fn) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(t >> 32) != gen || static_cast<int>(t & 0xffffffffu) >= n) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    (*fn)(static_cast<int>(t & 0xffffffffu));
    done_.fetch_add(1, std::memory_order_acq_rel);
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (threads_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  uint32_t gen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    resting_.store(false, std::memory_order_relaxed);
    gen = ++generation_;
    fn_ = &fn;
    n_ = n;
    done_.store(0, std::memory_order_relaxed);
    ticket_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  }
  wake_.notify_all();
  run_tasks(gen, n, &fn);
  // Tasks claimed by other threads may still run; fn stays alive until they finish.
  while (done_.load(std::memory_order_acquire) < n) cpu_relax();
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    while (static_cast<uint32_t>(ticket_.load(std::memory_order_acquire) >> 32) == seen && spins < kSpinIterations &&
           !resting_.load(std::memory_order_relaxed)) {
      cpu_relax();
      ++spins;
    }
    uint32_t gen;
    int n;
    const std::function<void(int)>* fn;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      gen = seen = generation_;
      n = n_;
      fn = fn_;
    }
    run_tasks(gen, n, fn);
  }
}

}  // namespace actord::cpu
