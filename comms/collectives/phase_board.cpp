#include "comms/collectives/phase_board.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace actord::coll {

PhaseBoard::PhaseBoard(AbortState* abort, RankState* ranks, int size, int rank, std::chrono::milliseconds timeout)
    : abort_(abort),
      ranks_(ranks),
      size_(size),
      rank_(rank),
      timeout_(timeout),
      published_(ranks[rank].progress.value.load(std::memory_order_relaxed)),
      pidfds_(static_cast<size_t>(size), -1) {}

PhaseBoard::~PhaseBoard() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

void PhaseBoard::watch_peers() {
  const int32_t self = static_cast<int32_t>(getpid());
  for (int r = 0; r < size_; ++r) {
    const int32_t pid = ranks_[r].pid.load(std::memory_order_acquire);
    if (r == rank_ || pid <= 0 || pid == self || pidfds_[r] >= 0) continue;
    pidfds_[r] = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pidfds_[r] < 0) pidfds_[r] = errno == ESRCH ? -2 : -1;  // gone already; or not watched (left to the timeout)
  }
}

void PhaseBoard::publish() {
  ++published_;
  signal(ranks_[rank_].progress);
}

Status PhaseBoard::wait_rank(int peer, uint32_t target, Clock::time_point deadline) {
  SyncWord& w = ranks_[peer].progress;
  return wait_until(
      w, [&] { return counter_distance(w.value.load(std::memory_order_acquire), target) >= 0; },
      [&] { return failure(peer); }, deadline, [&] { return timeout_error(peer, "did not arrive"); });
}

Status PhaseBoard::wait_all() {
  const auto until = deadline();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    ACTORD_TRY_STATUS(wait_rank(r, published_, until));
  }
  // A peer may have aborted after arriving: its reason wins over a result computed from a broken group.
  if (auto e = aborted()) return *e;
  return Status::success();
}

std::optional<Error> PhaseBoard::aborted() const {
  const uint32_t s = abort_->state.load(std::memory_order_acquire);
  if (s == 0) return std::nullopt;
  for (int i = 0; i < 1000 && abort_->state.load(std::memory_order_acquire) != 2; ++i) cpu_relax();
  std::string reason(abort_->reason, strnlen(abort_->reason, sizeof(abort_->reason)));
  return make_error(Errc::worker_failed,
                    "the group was aborted by rank " + std::to_string(abort_->rank) + " (" + reason + ")");
}

std::optional<Error> PhaseBoard::failure(int peer) const {
  if (auto e = aborted()) return e;
  if (ranks_[peer].left.load(std::memory_order_acquire) != 0) {
    return make_error(Errc::worker_failed, "rank " + std::to_string(peer) + " left the group");
  }
  const int fd = pidfds_[peer];
  if (fd == -2) {
    return make_error(Errc::worker_failed,
                      "rank " + std::to_string(peer) + " (pid " + std::to_string(ranks_[peer].pid.load()) + ") died");
  }
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) {  // a pidfd is readable once its process has ended
      return make_error(Errc::worker_failed,
                        "rank " + std::to_string(peer) + " (pid " + std::to_string(ranks_[peer].pid.load()) + ") died");
    }
  }
  return std::nullopt;
}

void PhaseBoard::abort(std::string_view reason) {
  uint32_t expected = 0;
  if (abort_->state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    abort_->rank = rank_;
    const size_t n = std::min(reason.size(), sizeof(abort_->reason) - 1);
    std::memcpy(abort_->reason, reason.data(), n);
    abort_->reason[n] = '\0';
    abort_->state.store(2, std::memory_order_release);
  }
  for (int r = 0; r < size_; ++r) wake_all(ranks_[r].progress);
}

void PhaseBoard::leave() {
  ranks_[rank_].left.store(1, std::memory_order_release);
  wake_all(ranks_[rank_].progress);
}

Error PhaseBoard::timeout_error(int peer, std::string_view what) const {
  return make_error(Errc::worker_failed, "rank " + std::to_string(peer) + " " + std::string(what) + " within " +
                                             std::to_string(timeout_.count()) + " ms");
}

}  // namespace actord::coll
