#include "actors/overlap_runner.hpp"

#include <algorithm>

namespace actord {

void OverlapRunner::Turns::acquire(int id) {
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return holder < 0 || holder == id; });
  holder = id;
}

void OverlapRunner::Turns::release(int id) {
  {
    std::lock_guard lock(mu);
    if (holder == id) holder = -1;
  }
  cv.notify_all();
}

OverlapRunner::OverlapRunner(int micro_batches) {
  const int n = std::max(micro_batches, 2);
  for (int id = 0; id < n; ++id) hooks_.push_back(std::make_unique<Hook>(turns_, id));
  for (int id = 1; id < n; ++id) helpers_.emplace_back([this, id] { loop(id); });
}

OverlapRunner::~OverlapRunner() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void OverlapRunner::loop(int id) {
  coll::set_wait_hook(hooks_[static_cast<size_t>(id)].get());
  uint64_t done_generation = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || generation_ != done_generation; });
    if (stop_) return;
    done_generation = generation_;
    const std::function<void()>& task = (*tasks_)[static_cast<size_t>(id)];
    lock.unlock();
    turns_.acquire(id);
    task();
    turns_.release(id);
    lock.lock();
    ++finished_;
    cv_.notify_all();
  }
}

void OverlapRunner::run(const std::vector<std::function<void()>>& tasks) {
  ACTORD_CHECK_MSG(tasks.size() == hooks_.size(), "OverlapRunner::run: one task per micro-batch");
  turns_.acquire(0);  // tasks[0] computes first
  {
    std::lock_guard lock(mu_);
    tasks_ = &tasks;
    finished_ = 0;
    ++generation_;
  }
  cv_.notify_all();
  coll::set_wait_hook(hooks_[0].get());
  tasks[0]();
  coll::set_wait_hook(nullptr);
  turns_.release(0);
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return finished_ == static_cast<int>(helpers_.size()); });
}

}  // namespace actord
