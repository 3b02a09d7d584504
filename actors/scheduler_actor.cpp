#include "actors/scheduler_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <deque>
#include <memory>
#include <string>

#include "actors/kv_move.hpp"
#include "actors/scheduler_state.hpp"
#include "actors/step_messages.hpp"
#include "core/elapsed.hpp"
#include "core/step_trace.hpp"
#include "core/micro_batch_split.hpp"
#include "scheduler/overlap_chooser.hpp"
#include "scheduler/step_deadline.hpp"
#include "structured/compile_check.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

namespace actord::sched {

uint64_t account_result(scheduler_state& st, const scheduler_state::Sent& sent,
                        std::chrono::steady_clock::time_point now, uint64_t answered_late_us);

// Sends the updates to their submitters: one StreamDeltaBatch per submitter.
void emit(self_ptr self, std::span<const SequenceUpdate> updates) {
  auto& st = self->state;
  thread_local std::vector<std::vector<const SequenceUpdate*>> by_owner;
  by_owner.resize(st.submitters.size());
  for (const auto& u : updates) by_owner[u.owner].push_back(&u);
  for (size_t owner = 0; owner < by_owner.size(); ++owner) {
    if (by_owner[owner].empty()) continue;
    wire_msg deltas = encode_stream_deltas(by_owner[owner], st.queue_micros);
    timed_send(st, [&] { tell(self, st.submitters[owner], delta_atom::value, std::move(deltas)); });
    by_owner[owner].clear();
  }
  if (!st.queue_micros.empty() || !st.arrivals.empty()) {
    for (const auto& u : updates) {
      st.queue_micros.erase(u.id);
      if (u.finish != Finish::none) st.arrivals.erase(u.id);  // ended before it was scheduled
    }
  }
}

void emit(self_ptr self, const SequenceUpdate& u) { emit(self, std::span<const SequenceUpdate>(&u, 1)); }

// Answers the drain request, if one waits.
void end_drain(scheduler_state& st) {
  if (!st.drain) return;
  st.drain->deliver(true);
  st.drain.reset();
}

// Submissions that came before the lease go back to the router as they are.
void requeue_pending(self_ptr self) {
  auto& st = self->state;
  for (auto& [sink, m] : st.pending) self->send(st.router, requeue_atom::value, sink, std::move(m));
  st.pending.clear();
}

// Tells the router how many tokens this replica still has to compute and generate (least_tokens routing), and
// answers a drain once nothing is left.
void report_load(self_ptr self) {
  auto& st = self->state;
  uint64_t outstanding = 0;
  bool work = false;
  for (const auto& lane : st.lanes) {
    outstanding += lane->batcher->outstanding_tokens();
    work = work || lane->batcher->has_work();
  }
  if (st.worker_failure.empty() && !st.drain)
    timed_send(st, [&] { self->send(st.router, load_atom::value, outstanding); });
  bool awaiting = false;
  for (const auto& lane : st.lanes) awaiting = awaiting || !lane->awaiting_blocks.empty();
  if (!work && st.in_flight.empty() && st.importing.empty() && !awaiting && st.handing_off.empty()) end_drain(st);
}

// Counts one failure `req` is handed back for: the count starts again when it generated tokens since the last one.
// Whether it now passes kMaxHandBacks.
bool counted_failure_exceeds_bound(SequenceRequest& req) {
  if (req.resumed.size() > req.resumed_at_hand_back) req.hand_backs = 0;
  req.resumed_at_hand_back = static_cast<uint32_t>(req.resumed.size());
  return ++req.hand_backs > kMaxHandBacks;
}

// Sends sequences back to the router as continuations (a lost worker's, a drain's waiting ones, a reshaped
// replica's), as their submitters; one handed back for a failure (`failure`) the kMaxHandBacks + 1-th time in a row
// without generating a token since the first ends here with an error (a request that made progress in between was
// not what killed its workers).
void hand_back(self_ptr self, HandBack back, const std::string& why, bool failure = true) {
  auto& st = self->state;
  for (const SequenceUpdate& u : back.cancelled) emit(self, u);
  for (SequenceRequest& req : back.requests) {
    if (failure && counted_failure_exceeds_bound(req)) {
      SequenceUpdate failed;
      failed.id = req.id;
      failed.finish = Finish::error;
      failed.error_code = Errc::worker_failed;
      failed.error = "handed back " + std::to_string(kMaxHandBacks) +
                     " times without a token generated between, the last because " + why;
      failed.prompt_tokens = static_cast<uint32_t>(req.prompt.size());
      failed.owner = req.owner;
      if (req.sampling.n > 1) failed.unforked_samples = req.sampling.n - 1;
      emit(self, failed);
      continue;
    }
    st.arrivals.erase(req.id);
    self->send(st.router, requeue_atom::value, st.submitters[req.owner], encode_submit(req));
  }
}

// Forgets the steps in flight (their results, should they come, are dropped) once their sequences are handed back.
void abandon_in_flight(scheduler_state& st) {
  st.abandoned_through = st.next_step_id - 1;
  while (!st.in_flight.empty()) {
    account_result(st, st.in_flight.front(), std::chrono::steady_clock::now(), 0);
    st.in_flight.pop_front();
  }
}

// The worker (or a rank of the replica) is gone: the router takes no new requests here, every sequence goes back
// to it with its tokens so far (steps in flight are forgotten), the ranks are stopped (a worker process is killed),
// and whatever arrives later goes back too. The coordinator rebuilds the replica.
void lose_worker(self_ptr self, const std::string& why) {
  auto& st = self->state;
  if (!st.worker_failure.empty()) return;
  st.worker_failure = why;
  spdlog::error("{}: worker lost, its sequences go back to the router: {}", st.actor_name, why);
  self->request(st.router, caf::infinite, leave_atom::value, caf::actor_cast<caf::actor>(self))
      .then([](bool) {}, [](const caf::error&) {});  // no more routed here: the coordinator waits for the same
  if (st.supervisor) tell(self, st.supervisor, lost_atom::value, why);
  for (const auto& lane : st.lanes) {
    self->send_exit(lane->worker, caf::exit_reason::unreachable);
    for (const auto& f : lane->followers) self->send_exit(f, caf::exit_reason::unreachable);
  }
  for (const auto& f : st.ffn_pool) self->send_exit(f, caf::exit_reason::unreachable);
  abandon_in_flight(st);
  for (const auto& lane : st.lanes) hand_back(self, lane->batcher->take_all(), why);
  flush_hand_offs(self);
  hand_back_imports(self);
  requeue_pending(self);
  end_drain(st);
}

// Plans and sends steps while the batcher has one to give; the scheduler's own time is booked by the caller.
void plan_and_send(self_ptr self);
// plan_and_send, booking its time.
void maybe_step(self_ptr self);

// CPU time of the calling thread, in nanoseconds: the scheduler's own cost, whatever else the cores are doing.
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Books the oldest step's times: its round trip, and its share of the wall clock (scheduler/step_clock.hpp: up to
// when it was done, `answered_late_us` before its result came), so that overlapping steps are not counted twice.
// At --log-level trace, one line a step says how its share was made (where the prefill / decode split comes from).
// Returns the share.
uint64_t account_result(scheduler_state& st, const scheduler_state::Sent& sent,
                        std::chrono::steady_clock::time_point now, uint64_t answered_late_us) {
  st.stats.round_trip_us += micros_between(sent.at, now);
  const auto previous_end = st.clock.last_end();
  const uint64_t share = st.clock.book(sent.at, now, answered_late_us);
  (sent.decode_only ? st.stats.decode_us : st.stats.prefill_us) += share;
  if (spdlog::should_log(spdlog::level::trace)) {
    const auto signed_us = [](auto from, auto to) {
      return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
    };
    spdlog::trace("{}: step {} ({} prefill + {} decode tokens) booked {} us as {}: result {} us after it was sent, "
                  "answered {} us late; sent {} us after the last booked end",
                  st.actor_name, sent.step_id, sent.prefill_tokens, sent.decode_tokens, share,
                  sent.decode_only ? "decode" : "prefill", micros_between(sent.at, now), answered_late_us,
                  previous_end == std::chrono::steady_clock::time_point{} ? 0 : signed_us(previous_end, sent.at));
  }
  return share;
}

// Steps that compute faster than a message round trip (~0.1-0.3 ms of thread wake-ups here) leave the worker
// idle between them even with the next step queued, because the one after is planned only when a result comes
// back: for those keep three steps in flight. Longer steps keep two, so a new request waits behind less queued work.
void adapt_pipeline_depth(scheduler_state& st, uint64_t compute_us) {
  constexpr double kShortStepMicros = 2000;
  st.compute_us_avg = st.compute_us_avg == 0 ? double(compute_us) : 0.9 * st.compute_us_avg + 0.1 * double(compute_us);
  for (const auto& lane : st.lanes) lane->batcher->set_max_steps_in_flight(st.compute_us_avg < kShortStepMicros ? 3 : 2);
}

// The oldest step, every lane's result in: each lane's samples go to its batcher (an idle lane's empty step only
// reports its timings and errors), then the next steps are planned.
void on_step_results(self_ptr self) {
  const uint64_t cpu0 = thread_cpu_ns();
  auto& st = self->state;
  const uint64_t send0 = st.send_ns;
  const scheduler_state::Sent sent = std::move(st.in_flight.front());
  st.in_flight.pop_front();
  const auto now = std::chrono::steady_clock::now();
  if (st.trace) {
    const auto ns = StepTrace::ns_of;
    try {
      for (size_t i = 0; i < sent.results.size(); ++i)
        st.trace->add_result(sent.results[i], sent.step_id, ns(sent.at), sent.received_ns[i]);
    } catch (const std::exception&) {  // a malformed result is reported below
    }
  }
  uint64_t compute_us = 0, idle_us = 0, comm_us = 0, answered_late_us = UINT64_MAX;
  bool finished = false, all_ok = true;
  for (size_t i = 0; i < st.lanes.size(); ++i) {
    Lane& lane = *st.lanes[i];
    const wire_msg& msg = sent.results[i];
    StepResultInfo info;
    try {
      info = decode_step_result(msg, st.samples, st.prompt_logprobs);
    } catch (const std::exception& e) {
      info.error = Error{Errc::worker_failed, std::string("malformed StepResult: ") + e.what()};
    }
    if (info.error && info.error->code == Errc::worker_failed) {
      lose_worker(self, info.error->message);
      book_own_time(st, thread_cpu_ns() - cpu0, send0);
      return;
    }
    std::span<const SequenceUpdate> updates;
    if (info.error) {
      spdlog::error("{}: step failed: {}", st.actor_name, info.error->message);
      all_ok = false;
      if (sent.planned[i]) updates = lane.batcher->on_step_failed(info.error->message);
    } else {
      // Samples of rejected drafts are no tokens: the batcher tells which it kept.
      const uint64_t drafts = lane.batcher->num_draft_tokens(), accepted = lane.batcher->num_accepted_drafts();
      if (sent.planned[i]) updates = lane.batcher->on_step_result(st.samples, st.prompt_logprobs);
      const uint64_t rejected =
          (lane.batcher->num_draft_tokens() - drafts) - (lane.batcher->num_accepted_drafts() - accepted);
      st.stats.sampled_tokens += st.samples.size() - rejected;
      if (sent.decode_only) st.stats.decode_tokens += st.samples.size() - rejected;
      // Lanes run at once: the step took as long as its slowest lane.
      compute_us = std::max(compute_us, info.compute_us);
      idle_us = std::max(idle_us, info.idle_us);
      comm_us = std::max(comm_us, info.comm_us);
      answered_late_us = std::min(answered_late_us, info.answered_late_us);  // done when its last lane was
      st.expert_load = add_expert_load(msg, st.stats) || st.expert_load.value_or(false);
    }
    emit(self, updates);
    finished = finished || std::any_of(updates.begin(), updates.end(),
                                       [](const SequenceUpdate& u) { return u.finish != Finish::none; });
    hand_off_prefilled(self, lane);  // after its first token went to its client
  }
  const uint64_t share = account_result(st, sent, now, answered_late_us == UINT64_MAX ? 0 : answered_late_us);
  if (st.trace)
    st.trace->add_scheduler_step(st.actor_name, sent.step_id, StepTrace::ns_of(sent.at), StepTrace::ns_of(now),
                                 sent.shape, share);
  if (all_ok) {
    st.stats.worker_compute_us += compute_us;
    st.stats.worker_idle_us += idle_us;
    st.stats.worker_comm_us += comm_us;
    if (std::vector<int32_t> moved = st.eplb->on_step(st.stats.expert_tokens); !moved.empty()) {
      st.stats.expert_placement = moved;
      st.stats.eplb_rebalances = st.eplb->rebalances();
      st.placement_to_send = std::move(moved);
    }
    adapt_pipeline_depth(st, compute_us);
    if (st.overlap_chooser) st.overlap_chooser->observe(sent.tokens, sent.split, compute_us);
    st.deadline->observe(sent.prefill_tokens, sent.decode_tokens, compute_us);
  }
  plan_and_send(self);
  // A drain is answered once no step is in flight either (the last one may carry only slices planned past an end).
  if (st.drain || finished) report_load(self);
  book_own_time(st, thread_cpu_ns() - cpu0, send0);  // the results, the deltas, the next plans: one measurement
}

scheduler_state::Sent* in_flight_step(scheduler_state& st, uint64_t step_id) {
  if (step_id <= st.abandoned_through) return nullptr;
  auto sent = std::find_if(st.in_flight.begin(), st.in_flight.end(),
                           [&](const scheduler_state::Sent& s) { return s.step_id == step_id; });
  return sent == st.in_flight.end() ? nullptr : &*sent;
}

// Takes the oldest steps whose results are all in.
void take_completed_steps(self_ptr self) {
  auto& st = self->state;
  while (!st.in_flight.empty() && st.in_flight.front().pending == 0 && st.worker_failure.empty())
    on_step_results(self);
}

// Lane `lane`'s result of step `step_id`; the step's results are taken, oldest step first, once every lane's came.
void on_lane_result(self_ptr self, uint64_t step_id, size_t lane, wire_msg&& msg) {
  scheduler_state::Sent* sent = in_flight_step(self->state, step_id);
  if (!sent || sent->results[lane].bytes.size() > 0) return;
  sent->results[lane] = std::move(msg);
  if (self->state.trace) sent->received_ns[lane] = StepTrace::now_ns();
  --sent->pending;
  take_completed_steps(self);
}

// --trace: a follower's (or an FFN rank's) result of step `step_id` is in; its spans go to the trace, with the
// step's send time and this arrival for clock alignment (null: the follower was lost).
void on_follower_result(self_ptr self, uint64_t step_id, const wire_msg* result = nullptr) {
  scheduler_state::Sent* sent = in_flight_step(self->state, step_id);
  if (result && self->state.trace) {
    try {
      self->state.trace->add_result(*result, step_id, sent ? StepTrace::ns_of(sent->at) : 0, StepTrace::now_ns());
    } catch (const std::exception&) {  // the driver's result reports what went wrong
    }
  }
  if (!sent || sent->pending == 0) return;
  --sent->pending;
  take_completed_steps(self);
}

// The worker missed a step's deadline: it is lost (lose_worker stops it; a worker process is killed).
void declare_worker_failed(self_ptr self) {
  auto& st = self->state;
  const scheduler_state::Sent& late = st.in_flight.front();
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - late.at);
  lose_worker(self, "worker stopped answering: step " + std::to_string(late.step_id) + " had no result after " +
                        std::to_string(waited.count()) + " ms (expected compute " +
                        std::to_string(late.expected_us.value_or(0) / 1000) + " ms, engine.step_timeout " +
                        std::to_string(st.deadline->slack().count()) + " ms)");
}

// Checks the oldest step's deadline every quarter of engine.step_timeout (at most every 250 ms) while steps are in
// flight: one timer message per period, none per step.
void arm_deadline_check(self_ptr self) {
  auto& st = self->state;
  if (st.deadline_check_armed || !st.worker_failure.empty()) return;
  st.deadline_check_armed = true;
  const auto period = std::clamp(st.deadline->slack() / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
  self->delayed_send(self, period, deadline_atom::value);
}

void check_deadline(self_ptr self) {
  auto& st = self->state;
  st.deadline_check_armed = false;
  if (st.in_flight.empty() || !st.worker_failure.empty()) return;
  const auto& oldest = st.in_flight.front();
  if (oldest.deadline && std::chrono::steady_clock::now() > *oldest.deadline) {
    declare_worker_failed(self);
    return;
  }
  arm_deadline_check(self);
}

void on_step_unreachable(self_ptr self, const caf::error& err) {
  lose_worker(self, "worker unreachable: " + self->system().render(err));
}

wire_msg lease_request(const std::string& holder, uint32_t blocks) {
  return build<wire::KvLeaseRequest>([&](wire::KvLeaseRequest::Builder out) {
    out.setCorrelationId(1);
    out.setHolder(holder);
    out.setNumBlocks(blocks);
  });
}

// The blocks the lanes hold, for SchedulerStats::lease_blocks.
uint64_t leased_blocks(const scheduler_state& st) {
  uint64_t n = 0;
  for (const auto& lane : st.lanes) n += lane->lease.num_total();
  return n;
}

// Grows a lane's lease in bulk when its last plan ran short of blocks (one request at a time, never per step), and
// gives back a large surplus when nothing waits.
void tend_lease(self_ptr self, Lane& lane) {
  auto& st = self->state;
  BatchScheduler& b = *lane.batcher;
  Lane* const at = &lane;  // the lanes outlive the actor's callbacks (they go with its state)
  if (const size_t wanted = b.blocks_wanted() + lane.import_wanted; wanted > 0 && !lane.lease_growing &&
                                                                      !lane.pool_exhausted) {
    const uint32_t ask = static_cast<uint32_t>(std::max<size_t>({wanted, lane.lease.num_total() / 2, 16}));
    lane.lease_growing = true;
    b.set_lease_growing(true);
    self->request(lane.kv_pool, caf::infinite, lease_atom::value, lease_request(lane.holder, ask))
        .then(
            [=](const wire_msg& msg) {
              auto& st = self->state;
              WireReader reader(msg);
              auto grant = reader.root<wire::KvLeaseGrant>();
              auto ids = to_vector<uint32_t>(grant.getBlockIds());
              if (!ids.empty()) {
                at->lease.add(ids);
                ++st.stats.lease_grows;
              }
              if (ids.size() < ask) at->pool_exhausted = true;
              at->lease_growing = false;
              at->batcher->set_lease_growing(false);
              st.stats.lease_blocks = leased_blocks(st);
              if (!at->awaiting_blocks.empty()) retry_imports(self, *at);
              maybe_step(self);
            },
            [=](const caf::error& err) {
              spdlog::error("{}: kv_pool unreachable: {}", self->state.actor_name, self->system().render(err));
              at->lease_growing = false;
              at->pool_exhausted = true;
              at->batcher->set_lease_growing(false);
              if (!at->awaiting_blocks.empty()) retry_imports(self, *at);
              maybe_step(self);
            });
    return;
  }
  if (const size_t spare = b.blocks_spare(); spare > 0 && !lane.lease_growing) {
    std::vector<uint32_t> ids = lane.lease.take_free(spare);
    self->send(lane.kv_pool, release_atom::value, build<wire::KvRelease>([&](wire::KvRelease::Builder out) {
                 out.setHolder(lane.holder);
                 fill_list(out.initBlockIds(static_cast<uint32_t>(ids.size())), ids);
               }));
    ++st.stats.lease_returns;
    st.stats.lease_blocks = leased_blocks(st);
    lane.pool_exhausted = false;
  }
}

void maybe_step(self_ptr self) {
  const uint64_t cpu0 = thread_cpu_ns();
  const uint64_t send0 = self->state.send_ns;
  plan_and_send(self);
  book_own_time(self->state, thread_cpu_ns() - cpu0, send0);
}

// The next step right away, and up to two more ahead of it; tends the leases when a plan ran short or nothing is
// left to plan. With lanes, a step goes out when any lane has one to run, the others get an empty one.
void plan_and_send(self_ptr self) {
  auto& st = self->state;
  if (st.lanes_ready < st.lanes.size()) return;
  const bool several = st.lanes.size() > 1;
  // Every rank is told the busiest lane's tokens when the ranks serve each other's FFNs (lanes, an FFN pool).
  const bool lockstep = several || !st.ffn_pool.empty();
  static const StepPlan kEmptyStep;
  for (;;) {
    if (several && st.in_flight.size() >= kMaxLaneStepsInFlight) return;
    // Lanes keep in step: while a lane with work waits for a result before it may plan again, the others wait with
    // it (planning them alone would pair each lane's steps with the other's empty ones, halving the throughput).
    if (several && std::any_of(st.lanes.begin(), st.lanes.end(), [](const auto& lane) {
          const BatchScheduler& b = *lane->batcher;
          return b.has_work() && b.steps_in_flight() >= b.max_steps_in_flight();
        }))
      return;
    st.plans.assign(st.lanes.size(), nullptr);
    bool any = false;
    int most_tokens = 0;
    // The busiest lane's tokens in each micro-batch of two-batch overlap (the workers' cut).
    st.lane_micro_tokens.assign(static_cast<size_t>(st.micro_batches), 0);
    for (size_t i = 0; i < st.lanes.size(); ++i) {
      const StepPlan* plan = st.plans[i] = st.lanes[i]->batcher->plan_step();
      any = any || plan;
      if (!plan) continue;
      most_tokens = std::max(most_tokens, plan->num_tokens);
      if (!lockstep || st.micro_batches < 2) continue;
      const std::vector<int64_t> parts =
          micro_batch_tokens(plan->slices.size(), st.micro_batches, [&](size_t s) { return plan->slices[s].num_tokens; });
      for (size_t k = 0; k < parts.size(); ++k)
        st.lane_micro_tokens[k] = std::max(st.lane_micro_tokens[k], static_cast<uint32_t>(parts[k]));
    }
    const uint32_t lane_tokens = lockstep ? static_cast<uint32_t>(most_tokens) : 0;
    if (!any) {
      for (const auto& lane : st.lanes) tend_lease(self, *lane);
      return;
    }
    const uint64_t step_id = st.next_step_id++;
    scheduler_state::Sent sent;
    sent.step_id = step_id;
    sent.tokens = static_cast<uint32_t>(most_tokens);
    sent.split = !st.overlap_chooser || st.overlap_chooser->choose_split(most_tokens);
    sent.decode_only = true;
    sent.planned.assign(st.lanes.size(), 0);
    sent.results.resize(st.lanes.size());
    sent.received_ns.assign(st.lanes.size(), 0);
    sent.pending = st.lanes.size();
    if (st.trace) {  // a traced step is complete once every rank's spans are in
      for (const auto& lane : st.lanes) sent.pending += lane->followers.size();
      sent.pending += st.ffn_pool.size();
    }
    size_t seqs = 0;
    bool planned_ahead = false;
    for (size_t i = 0; i < st.lanes.size(); ++i) {
      const StepPlan* plan = st.plans[i];
      if (!plan) continue;
      sent.planned[i] = 1;
      sent.decode_only = sent.decode_only && plan->decode_only();
      sent.prefill_tokens += static_cast<uint32_t>(plan->num_prefill_tokens);
      sent.decode_tokens += static_cast<uint32_t>(plan->num_tokens - plan->num_prefill_tokens);
      seqs += plan->slices.size();
      if (st.trace) sent.shape += shape_of(*plan);
      planned_ahead = planned_ahead || plan->planned_ahead;
      st.stats.tokens += static_cast<uint64_t>(plan->num_tokens);
      st.stats.prefill_tokens += static_cast<uint64_t>(plan->num_prefill_tokens);
      if (!plan->decode_only() && !st.arrivals.empty()) {  // requests scheduled for the first time
        const auto now = std::chrono::steady_clock::now();
        for (const PlannedSlice& slice : plan->slices) {
          auto arrival = st.arrivals.find(slice.seq_id);
          if (arrival == st.arrivals.end()) continue;
          st.queue_micros[slice.seq_id] = std::max<uint64_t>(1, micros_between(arrival->second, now));
          st.arrivals.erase(arrival);
        }
      }
    }
    ++st.stats.steps;
    if (planned_ahead) ++st.stats.steps_planned_ahead;
    st.stats.max_seqs_in_step = std::max<uint64_t>(st.stats.max_seqs_in_step, seqs);
    std::optional<uint64_t> ahead_us = 0;
    for (const auto& s : st.in_flight) {
      if (!s.expected_us) ahead_us.reset();
      if (ahead_us) *ahead_us += *s.expected_us;
    }
    sent.expected_us = st.deadline->expected_us(sent.prefill_tokens, sent.decode_tokens);
    const auto wait = st.deadline->deadline(ahead_us, sent.expected_us);
    sent.at = std::chrono::steady_clock::now();
    if (wait) sent.deadline = sent.at + *wait;
    const bool sent_split = sent.split;
    st.in_flight.push_back(std::move(sent));
    timed_send(st, [&] {
      for (size_t i = 0; i < st.lanes.size(); ++i) {
        Lane& lane = *st.lanes[i];
        wire_msg step = encode_execute_step(st.plans[i] ? *st.plans[i] : kEmptyStep, step_id, st.placement_to_send,
                                            lane_tokens, st.trace != nullptr, st.lane_micro_tokens, !sent_split);
        for (const auto& f : lane.followers) {
          if (st.expert_load == false && !st.trace) {
            caf::anon_send(f, step_atom::value, step);  // their replies go nowhere
            continue;
          }
          self->request(f, caf::infinite, step_atom::value, step)
              .then(
                  [=](const wire_msg& result) {
                    try {
                      add_expert_load(result, self->state.stats);
                    } catch (const std::exception&) {  // the driver's result reports what went wrong
                    }
                    if (self->state.trace) on_follower_result(self, step_id, &result);
                  },
                  [=](const caf::error&) {  // a lost follower breaks the replica: the driver's result says so
                    if (self->state.trace) on_follower_result(self, step_id);
                  });
        }
        self->request(lane.worker, caf::infinite, step_atom::value, std::move(step))
            .then([=](wire_msg& result) { on_lane_result(self, step_id, i, std::move(result)); },
                  [=](const caf::error& err) {
                    if (step_id > self->state.abandoned_through) on_step_unreachable(self, err);
                  });
      }
      if (st.ffn_pool.empty()) return;
      const wire_msg pool_step = encode_execute_step(kEmptyStep, step_id, st.placement_to_send, lane_tokens,
                                                     st.trace != nullptr, st.lane_micro_tokens, !sent_split);
      for (const auto& f : st.ffn_pool) {
        if (!st.trace) {
          caf::anon_send(f, step_atom::value, pool_step);  // their replies go nowhere; a loss breaks the lanes' steps
          continue;
        }
        self->request(f, caf::infinite, step_atom::value, pool_step)
            .then([=](const wire_msg& result) { on_follower_result(self, step_id, &result); },
                  [=](const caf::error&) { on_follower_result(self, step_id); });
      }
    });
    st.placement_to_send.clear();  // every rank got this step
    arm_deadline_check(self);
    for (const auto& lane : st.lanes)
      if (lane->batcher->blocks_wanted() > 0) tend_lease(self, *lane);
  }
}

// The lane with the fewest tokens still to compute and generate.
Lane& least_loaded_lane(scheduler_state& st) {
  Lane* best = st.lanes.front().get();
  uint64_t least = UINT64_MAX;
  for (const auto& lane : st.lanes) {
    const uint64_t tokens = lane->batcher->outstanding_tokens();
    if (tokens < least) {
      least = tokens;
      best = lane.get();
    }
  }
  return *best;
}

void handle_submit(self_ptr self, const caf::actor& sink, const wire_msg& msg) {
  SequenceRequest req;
  try {
    req = decode_submit(msg);
  } catch (const std::exception& e) {
    spdlog::warn("{}: malformed SubmitRequest dropped: {}", self->state.actor_name, e.what());
    return;
  }
  auto& submitters = self->state.submitters;
  auto known = std::find(submitters.begin(), submitters.end(), sink);
  req.owner = static_cast<uint32_t>(known - submitters.begin());
  if (known == submitters.end()) submitters.push_back(sink);
  self->state.arrivals.emplace(req.id, std::chrono::steady_clock::now());
  Lane& lane = least_loaded_lane(self->state);
  const int kv_tokens = kv_tokens_of(msg);
  if (kv_tokens > 0 && kv_tokens < static_cast<int>(req.prompt.size() + req.resumed.size()) &&
      !self->state.importing.count(req.id)) {
    if (auto blocks = lane.batcher->take_blocks(kv_tokens)) return import_kv(self, lane, std::move(req), sink, msg,
                                                                             std::move(*blocks), kv_tokens);
    if (!lane.pool_exhausted) {  // the lease grows first (tend_lease), then it is imported (retry_imports)
      self->state.arrivals.erase(req.id);
      lane.import_wanted += lane.batcher->blocks_for(kv_tokens);
      lane.awaiting_blocks.emplace_back(sink, msg);
      tend_lease(self, lane);
      return;
    }
  }
  if (auto refused = lane.batcher->add(std::move(req))) emit(self, *refused);
  maybe_step(self);
}

scheduler_actor::behavior_type scheduler_impl(self_ptr self, SchedulerLimits limits, std::vector<SchedulerLane> lanes,
                                              std::vector<worker_actor> ffn_pool, MicroBatching micro, router_actor router,
                                              caf::actor supervisor,
                             std::string name, std::chrono::milliseconds step_timeout, EplbSettings eplb,
                             std::shared_ptr<TraceSink> trace) {
  auto& st = self->state;
  st.trace = std::move(trace);
  st.ffn_pool = std::move(ffn_pool);
  st.micro_batches = micro.count;
  if (micro.chosen && micro.count >= 2) st.overlap_chooser = std::make_unique<OverlapChooser>();
  st.eplb = std::make_unique<EplbPlanner>(eplb);
  st.stats.expert_placement = st.eplb->placement();
  st.router = std::move(router);
  st.move_kv = limits.move_kv;
  st.supervisor = std::move(supervisor);
  st.deadline = std::make_unique<StepDeadline>(step_timeout);
  st.actor_name = std::move(name);
  ACTORD_CHECK_MSG(!lanes.empty(), "a scheduler without a lane");
  // A request's JSON schema, regex or grammar must compile here, so that the worker that samples it never fails a
  // step over it; the last distinct ones that did are remembered, so that a repeated one costs a lookup.
  limits.check_response_format = [](const SamplingOptions& o) -> Status {
    const std::string* text = o.format_text();
    if (!text) return {};
    if (Status s = structured::compiles(o.response_format, *text); !s)
      return make_error(Errc::invalid_argument, structured::format_error(o.response_format, s.error().message));
    return {};
  };
  for (size_t i = 0; i < lanes.size(); ++i) {
    auto lane = std::make_unique<Lane>();
    lane->worker = std::move(lanes[i].worker);
    lane->followers = std::move(lanes[i].followers);
    lane->kv_pool = std::move(lanes[i].kv_pool);
    lane->holder = lanes.size() == 1 ? st.actor_name : st.actor_name + "/dp" + std::to_string(i);
    lane->batcher = std::make_unique<BatchScheduler>(limits, lane->lease, std::move(lanes[i].policy));
    st.lanes.push_back(std::move(lane));
  }
  for (const auto& lane : st.lanes) {
    Lane* const at = lane.get();
    self->request(at->kv_pool, caf::infinite, lease_atom::value, lease_request(at->holder, limits.lease_reserve))
        .then([=](const wire_msg& msg) {
          WireReader reader(msg);
          auto grant = reader.root<wire::KvLeaseGrant>();
          if (has_error(grant.getError())) {
            spdlog::error("{}: no KV lease: {}", at->holder, std::string(grant.getError().getMessage()));
          }
          auto ids = grant.getBlockIds();
          at->lease.add(to_vector<uint32_t>(ids));
          at->lease_ready = true;
          auto& st = self->state;
          st.stats.lease_blocks = leased_blocks(st);
          spdlog::debug("{}: leased {} KV blocks", at->holder, ids.size());
          if (++st.lanes_ready < st.lanes.size()) return;
          auto pending = std::move(st.pending);
          for (auto& [sink, m] : pending) handle_submit(self, sink, m);
        });
  }
  return {
      [=](submit_atom, wire_msg& msg) {
        auto sink = caf::actor_cast<caf::actor>(self->current_sender());
        if (!self->state.worker_failure.empty() || self->state.drain) {  // routed here before the router knew
          self->send(self->state.router, requeue_atom::value, sink, std::move(msg));
          return;
        }
        if (self->state.lanes_ready < self->state.lanes.size()) {
          self->state.pending.emplace_back(std::move(sink), msg);
          return;
        }
        handle_submit(self, sink, msg);
      },
      [=](stats_atom, const wire_msg& msg) -> wire_msg {
        WireReader reader(msg);
        const uint64_t correlation = reader.root<wire::StatsRequest>().getCorrelationId();
        SchedulerStats stats = self->state.stats;
        stats.scheduler_us = self->state.own_ns / 1000;
        stats.scheduler_send_us = self->state.send_ns / 1000;
        stats.waiting_seqs = self->state.pending.size();
        for (const auto& lane : self->state.lanes) {  // the lanes' batchers, summed
          const BatchScheduler& b = *lane->batcher;
          stats.preemptions += b.num_preemptions();
          stats.draft_tokens += b.num_draft_tokens();
          stats.accepted_draft_tokens += b.num_accepted_drafts();
          stats.swap_outs += b.num_swap_outs();
          stats.swap_ins += b.num_swap_ins();
          stats.swapped_blocks += b.swapped_blocks();
          stats.running_seqs += b.num_running();
          stats.waiting_seqs += b.num_waiting();
          stats.prefill_backlog += b.prefill_backlog();
          stats.swapped_seqs += b.num_swapped();
          const PrefixCacheStats cache = b.prefix_cache_stats();
          stats.prefix_query_blocks += cache.query_blocks;
          stats.prefix_hit_blocks += cache.hit_blocks;
          stats.prefix_evictions += cache.evictions;
          stats.prefix_cached_blocks += cache.cached_blocks;
        }
        return build<wire::SchedulerStats>([&](wire::SchedulerStats::Builder out) {
          to_wire(stats, out);
          out.setCorrelationId(correlation);
        });
      },
      [=](deadline_atom) { check_deadline(self); },
      // The coordinator saw a rank of this replica go down: everything goes back to the router.
      [=](lost_atom, const std::string& why) {
        lose_worker(self, why);
        return self->state.worker_failure;  // the first cause seen, here or by the coordinator
      },
      // Scale-down: no new requests come (the router was told); what waits goes back to the router, what runs
      // finishes here; answered when nothing is left.
      [=](drain_atom) -> caf::result<bool> {
        auto& st = self->state;
        if (!st.worker_failure.empty()) return true;
        auto rp = self->make_response_promise<bool>();
        st.drain = rp;
        for (const auto& lane : st.lanes) hand_back(self, lane->batcher->take_waiting(), "its replica drains");
        requeue_pending(self);
        report_load(self);
        return rp;
      },
      // A scale-up: what has not started here goes back to the router, to be spread over the grown group.
      [=](rebalance_atom) {
        auto& st = self->state;
        if (!st.worker_failure.empty() || st.drain) return;
        size_t handed = 0;
        for (const auto& lane : st.lanes) {
          HandBack back = lane->batcher->take_unstarted();
          handed += back.requests.size();
          hand_back(self, std::move(back), "a replica joined its group", /*failure=*/false);
        }
        if (handed == 0) return;
        st.stats.rebalanced_seqs += handed;
        spdlog::info("{}: {} waiting sequences handed back to be spread over the grown group", st.actor_name, handed);
        report_load(self);
      },
      // A reshape (actord apply) replaces this replica: every sequence goes back to the router, a running one as a
      // continuation with the tokens it has reported and, with move_kv, its KV (migrate_all); the steps in flight
      // are dropped, without counting as a failure; anything that arrives later goes back too.
      [=](migrate_atom) -> caf::result<bool> {
        auto& st = self->state;
        if (!st.worker_failure.empty()) return true;
        st.worker_failure = "its replica was replaced by a reshape";
        abandon_in_flight(st);
        auto rp = self->make_response_promise<bool>();
        migrate_all(self, rp);
        return rp;
      },
      [=](cancel_atom, const wire_msg& msg) {
        WireReader reader(msg);
        const uint64_t id = reader.root<wire::CancelRequest>().getRequestId();
        if (auto it = self->state.importing.find(id); it != self->state.importing.end()) {
          it->second->cancelled = true;
          return;
        }
        for (const auto& lane : self->state.lanes) {
          if (auto done = lane->batcher->cancel(id)) {
            emit(self, *done);
            break;
          }
        }
      },
  };
}

}  // namespace actord::sched

namespace actord {

scheduler_actor spawn_scheduler(caf::actor_system& system, const SchedulerLimits& limits, std::vector<SchedulerLane> lanes,
                                std::vector<worker_actor> ffn_pool, MicroBatching micro, router_actor router,
                                caf::actor supervisor, std::string name, std::chrono::milliseconds step_timeout,
                                EplbSettings eplb, std::shared_ptr<TraceSink> trace) {
  return system.spawn(sched::scheduler_impl, limits, std::move(lanes), std::move(ffn_pool), micro, std::move(router),
                      std::move(supervisor), std::move(name), step_timeout, eplb, std::move(trace));
}

}  // namespace actord
