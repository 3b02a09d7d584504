// WorkerCore's steps that run ahead: a step left pending, answered when the next is queued behind it or once the
// device has done it (actors/worker_core.hpp).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "actors/worker_core.hpp"
#include "comms/capnp_codec.hpp"
#include "core/elapsed.hpp"
#include "core/percentile.hpp"

namespace actord {

void WorkerCore::step(const wire_msg& msg, std::vector<wire_msg>& done) {
  if (std::optional<wire_msg> now = launch(msg, done)) done.push_back(std::move(*now));
}

wire_msg WorkerCore::execute(const wire_msg& msg) {
  ACTORD_CHECK(!pending_);  // its result would have nowhere to go
  std::vector<wire_msg> done;
  step(msg, done);
  if (pending_) done.push_back(finish_pending());
  return std::move(done.back());
}

bool WorkerCore::pending_done() {
  if (!pending_ || pending_->done_at) return true;
  if (!backend_->reads_done(pending_->ticket)) return false;
  pending_->done_at = std::chrono::steady_clock::now();
  return true;
}

void WorkerCore::pause_while_pending() const {
  constexpr auto kYielding = std::chrono::microseconds(200);
  if (pending_ && std::chrono::steady_clock::now() - pending_->start > kYielding)
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  else
    std::this_thread::yield();
}

wire_msg WorkerCore::finish_pending() {
  PendingStep step = std::move(*pending_);
  pending_.reset();
  return finish(step);
}

WorkerCore::~WorkerCore() {
  AheadCounts& c = ahead_counts_;
  if (!c.on || !backend_ || !backend_->runs_ahead() || c.steps == 0) return;
  std::fprintf(stderr,
               "%s: %lu steps, %lu ran ahead (%lu queued behind a pending one), host walk %.3f ms a step, wait for "
               "picks %.3f ms a step ahead; decode steps: walk p50 %.3f p90 %.3f ms, wait p50 %.3f p90 %.3f ms\n",
               name_.c_str(), (unsigned long)c.steps, (unsigned long)c.deferred, (unsigned long)c.behind_pending,
               c.walk_ms / double(c.steps), c.deferred ? c.wait_ms / double(c.deferred) : 0.0,
               percentile(c.decode_walk_ms, 50), percentile(c.decode_walk_ms, 90), percentile(c.decode_wait_ms, 50),
               percentile(c.decode_wait_ms, 90));
}

wire_msg WorkerCore::finish(PendingStep& p) {
  const auto w0 = std::chrono::steady_clock::now();
  backend_->complete_reads(p.ticket);
  const auto t1 = std::chrono::steady_clock::now();
  const double wait = std::chrono::duration<double, std::milli>(t1 - w0).count();
  ahead_counts_.wait_ms += wait;
  if (p.decode_only && ahead_counts_.on) ahead_counts_.decode_wait_ms.push_back(wait);
  // Its time: from its start (or the end of the step before, still on the device then) to when it was seen done.
  const auto end = p.done_at.value_or(t1);
  const auto busy_from = last_step_end_ ? std::max(p.start, *last_step_end_) : p.start;
  last_step_end_ = end;
  previous_samples_.clear();
  for (const RowBest& b : p.bests) previous_samples_.push_back(b.id);  // one rank: its picks are the tokens
  for (const SampledToken& t : p.draws) previous_samples_.push_back(t.token);
  previous_failed_ = false;
  tokens_everywhere_ = false;
  wire_msg out = build<wire::StepResult>([&](wire::StepResult::Builder r) {
    r.setCorrelationId(p.correlation_id);
    r.setStepId(p.step_id);
    const size_t picks = previous_samples_.size();
    if (picks != p.seq_ids.size()) {
      set_error(r.initError(), Error{Errc::worker_failed, name_ + ": " + std::to_string(picks) + " picks for " +
                                                              std::to_string(p.seq_ids.size()) + " sampled rows"});
      return;
    }
    auto results = r.initResults(static_cast<uint32_t>(picks));
    for (uint32_t i = 0; i < picks; ++i) {
      results[i].setTokenId(previous_samples_[i]);
      results[i].setSeqId(p.seq_ids[i]);
    }
    r.setComputeMicros(micros_between(busy_from, end));
    r.setIdleMicros(p.idle_us);
    r.setAnsweredLateMicros(micros_between(end, t1));
  });
  if (spare_bests_.capacity() == 0) spare_bests_ = std::move(p.bests);
  if (samples_.capacity() == 0) samples_ = std::move(p.draws);
  return out;
}

}  // namespace actord
