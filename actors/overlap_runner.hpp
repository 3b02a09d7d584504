// Two-batch overlap inside one rank: two micro-batches' forward passes run at once, one on the calling thread and
// one on a thread of the runner's own, taking turns to compute. A thread holds the compute baton while it computes
// and hands it over while one of its collective operations waits (coll::WaitHook, which every Communicator calls),
// so one micro-batch's communication overlaps the other's compute; the two never compute at once, so the rank's
// backend (its thread pool, its memory) sees one caller at a time. Each micro-batch needs collective groups of its
// own (its peers' operations pair with its own).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "comms/collectives/communicator.hpp"

namespace actord {

class OverlapRunner {
 public:
  OverlapRunner();
  ~OverlapRunner();
  OverlapRunner(const OverlapRunner&) = delete;
  OverlapRunner& operator=(const OverlapRunner&) = delete;
  // Runs `first` on this thread and `second` on the runner's, each holding the baton except while it waits in a
  // collective; returns when both have returned. `first` starts computing first.
  void run(const std::function<void()>& first, const std::function<void()>& second);

 private:
  class Baton final : public coll::WaitHook {
   public:
    void before_wait() override { mu_.unlock(); }
    void after_wait() override { mu_.lock(); }
    std::mutex mu_;
  };
  void loop();

  Baton baton_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* task_ = nullptr;  // the helper's next task, under mu_
  bool done_ = false;
  bool stop_ = false;
  std::thread helper_;
};

}  // namespace actord
