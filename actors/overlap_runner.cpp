#include "actors/overlap_runner.hpp"

namespace actord {

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
  coll::set_wait_hook(&baton_);
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || task_ != nullptr; });
    if (stop_) return;
    const std::function<void()>* task = task_;
    lock.unlock();
    baton_.mu_.lock();
    (*task)();
    baton_.mu_.unlock();
    lock.lock();
    task_ = nullptr;
    done_ = true;
    cv_.notify_all();
  }
}

void OverlapRunner::run(const std::function<void()>& first, const std::function<void()>& second) {
  baton_.mu_.lock();  // before the helper can: `first` computes first
  {
    std::lock_guard lock(mu_);
    task_ = &second;
    done_ = false;
  }
  cv_.notify_all();
  coll::set_wait_hook(&baton_);
  first();
  coll::set_wait_hook(nullptr);
  baton_.mu_.unlock();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

}  // namespace actord
