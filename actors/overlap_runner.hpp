// Two-batch overlap inside one rank: several micro-batches' forward passes run at once, the first on the calling
// thread and each other one on a thread of the runner's own, taking turns to compute. A thread holds the compute
// baton while it computes and hands it over when one of its collective operations first has to wait
// (coll::WaitHook, which every Communicator calls), so one micro-batch's communication overlaps another's compute;
// two never compute at once, so the rank's backend (its thread pool, its memory) sees one caller at a time. Each
// micro-batch needs collective groups of its own (its peers' operations pair with its own).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comms/collectives/communicator.hpp"

namespace actord {

class OverlapRunner {
 public:
  // `micro_batches`: how many run at once (2 or more): micro_batches - 1 threads of its own.
  explicit OverlapRunner(int micro_batches = 2);
  ~OverlapRunner();
  OverlapRunner(const OverlapRunner&) = delete;
  OverlapRunner& operator=(const OverlapRunner&) = delete;
  int micro_batches() const { return static_cast<int>(hooks_.size()); }
  // Runs tasks[0] on this thread and tasks[k] on the runner's k-th thread (as many tasks as micro_batches()), each
  // holding the baton except while it waits in a collective; returns when all have returned. tasks[0] starts
  // computing first.
  void run(const std::vector<std::function<void()>>& tasks);

 private:
  // The compute baton: held by the micro-batch computing (-1: none), taken by whichever wants it while it is free.
  // Not passed in strict turns: a thread whose collective completes without waiting keeps computing
  // (communicator.hpp's about_to_block), so the threads' turns differ from rank to rank, and strict turns could
  // then leave a rank's thread waiting for its sibling's turn while the sibling waits for a peer whose own thread
  // waits for its turn (a cycle). Waiting for the baton only while another computes cannot deadlock.
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
  void loop(int id);

  Turns turns_;
  std::vector<std::unique_ptr<Hook>> hooks_;  // [micro-batch]
  std::mutex mu_;
  std::condition_variable cv_;
  const std::vector<std::function<void()>>* tasks_ = nullptr;  // the current run's, under mu_
  uint64_t generation_ = 0;   // runs started, under mu_: a helper runs each generation's task once
  int finished_ = 0;          // helpers done with the current generation, under mu_
  bool stop_ = false;
  std::vector<std::thread> helpers_;
};

}  // namespace actord
