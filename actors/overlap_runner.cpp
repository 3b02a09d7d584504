#include "actors/overlap_runner.hpp"

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

OverlapRunner::OverlapRunner() : helper_([this] { loop(); }) {}

OverlapRunner::~OverlapRunner() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  helper_.join();
}

void OverlapRunner::loop() {
  coll::set_wait_hook(&hooks_[1]);
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || task_ != nullptr; });
    if (stop_) return;
    const std::function<void()>* task = task_;
    lock.unlock();
    turns_.acquire(1);
    (*task)();
    turns_.release(1);
    lock.lock();
    task_ = nullptr;
    done_ = true;
    cv_.notify_all();
  }
}

void OverlapRunner::run(const std::function<void()>& first, const std::function<void()>& second) {
  turns_.acquire(0);  // `first` computes first
  {
    std::lock_guard lock(mu_);
    task_ = &second;
    done_ = false;
  }
  cv_.notify_all();
  coll::set_wait_hook(&hooks_[0]);
  first();
  coll::set_wait_hook(nullptr);
  turns_.release(0);
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

}  // namespace actord
