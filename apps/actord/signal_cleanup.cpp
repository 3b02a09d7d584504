#include "apps/actord/signal_cleanup.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "comms/collectives/shm_segment.hpp"

namespace actord::cli {

void end_on_signals_after_cleanup() {
  signal(SIGPIPE, SIG_IGN);
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals] {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    coll::ShmSegment::remove_all_of(getpid());
    signal(sig, SIG_DFL);
    sigset_t just_this;
    sigemptyset(&just_this);
    sigaddset(&just_this, sig);
    pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
    raise(sig);
  }).detach();
}

}  // namespace actord::cli
