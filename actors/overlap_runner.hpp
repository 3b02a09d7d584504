// Two-batch overlap inside one rank: two micro-batches' forward passes run at once, one on the calling thread and
// one on a thread of the runner's own, taking turns to compute. A thread holds the compute baton while it computes
// and hands it over when one of its collective operations starts waiting (coll::WaitHook, which every
// Communicator calls), so one micro-batch's communication overlaps the other's compute; the two never compute at once, so the rank's
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
  // The compute baton: held by the micro-batch computing (-1: neither), taken by whichever wants it while it is
  // free. Not passed in strict turns: a thread whose collective completes without waiting keeps computing
  // (communicator.hpp's about_to_block), so the two threads' turns differ from rank to rank, and strict turns could
  // then leave a rank's thread waiting for its sibling's turn while the sibling waits for a peer whose own thread
  // waits for its turn (a cycle). Waiting for the baton only while the other computes cannot deadlock.
  struct Turns {
    std::mutex mu;
    std::condition_variable cv;
    int holder = -1;
    void acquire(int id);
    void release(int id);
  };
  class Hook final : public coll::WaitHook {
   public:
    Hook(Turns& turns, int id) : turns_(turns), id_(id) {}
    void before_wait() override { turns_.release(id_); }
    void after_wait() override { turns_.acquire(id_); }

   private:
    Turns& turns_;
    int id_;
  };
  void loop();

  Turns turns_;
  Hook hooks_[2] = {Hook(turns_, 0), Hook(turns_, 1)};
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* task_ = nullptr;  // the helper's next task, under mu_
  bool done_ = false;
  bool stop_ = false;
  std::thread helper_;
};

}  // namespace actord
