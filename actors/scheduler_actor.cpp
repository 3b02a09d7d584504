#include "actors/scheduler_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <spdlog/spdlog.h>

#include <time.h>

#include <algorithm>
#include <chrono>

#include "actors/step_messages.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"

namespace actord {
namespace {

struct scheduler_state {
  std::string actor_name;
  BlockAllocator lease;                       // blocks leased from the kv_pool
  std::unique_ptr<BatchScheduler> batcher;
  caf::actor worker;
  caf::actor kv_pool;
  bool lease_ready = false;
  std::vector<std::pair<caf::actor, wire_msg>> pending;   // submissions that arrived before the lease
  // Who gets a request's deltas, indexed by SequenceRequest::owner: each distinct submitter once (engines and
  // front ends are few and long-lived).
  std::vector<caf::actor> submitters;
  uint64_t next_step_id = 1;
  // Statistics (see SchedulerStats).
  uint64_t steps = 0, tokens = 0, sampled = 0, round_trip_us = 0, compute_us = 0, own_ns = 0;
  uint64_t prefill_tokens = 0, prefill_us = 0, decode_tokens = 0, decode_us = 0;
  uint32_t max_seqs_in_step = 0;
  std::chrono::steady_clock::time_point step_sent;
  bool step_is_decode = false;  // the step in flight carries no prefill tokens
  static inline const char* name = "scheduler";
};

using self_ptr = caf::stateful_actor<scheduler_state>*;

// Sends the updates to their submitters: one StreamDeltaBatch per submitter.
void emit(self_ptr self, const std::vector<SequenceUpdate>& updates) {
  auto& st = self->state;
  thread_local std::vector<std::vector<const SequenceUpdate*>> by_owner;
  by_owner.resize(st.submitters.size());
  for (const auto& u : updates) by_owner[u.owner].push_back(&u);
  for (size_t owner = 0; owner < by_owner.size(); ++owner) {
    if (by_owner[owner].empty()) continue;
    self->send(st.submitters[owner], delta_atom::value, encode_stream_deltas(by_owner[owner]));
    by_owner[owner].clear();
  }
}

void emit(self_ptr self, const SequenceUpdate& u) { emit(self, std::vector<SequenceUpdate>{u}); }

void maybe_step(self_ptr self);

// CPU time of the calling thread, in nanoseconds: the scheduler's own cost, whatever else the cores are doing.
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t micros_since(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t).count());
}

void on_step_result(self_ptr self, const wire_msg& msg) {
  const uint64_t cpu0 = thread_cpu_ns();
  auto& st = self->state;
  const uint64_t round_trip = micros_since(st.step_sent);
  st.round_trip_us += round_trip;
  (st.step_is_decode ? st.decode_us : st.prefill_us) += round_trip;
  WireReader reader(msg);
  auto result = reader.root<wire::StepResult>();
  std::vector<SequenceUpdate> updates;
  if (has_error(result.getError())) {
    const Error err = get_error(result.getError());
    spdlog::error("{}: step failed: {}", self->state.actor_name, err.message);
    updates = self->state.batcher->on_step_failed(err.message);
  } else {
    std::vector<std::pair<uint64_t, int32_t>> sampled;
    sampled.reserve(result.getResults().size());
    for (auto r : result.getResults()) sampled.emplace_back(r.getSeqId(), r.getTokenId());
    self->state.sampled += sampled.size();
    if (st.step_is_decode) st.decode_tokens += sampled.size();
    self->state.compute_us += result.getComputeMicros();
    updates = self->state.batcher->on_step_result(sampled);
  }
  emit(self, updates);
  self->state.own_ns += thread_cpu_ns() - cpu0;
  maybe_step(self);
}

void maybe_step(self_ptr self) {
  auto& st = self->state;
  if (!st.lease_ready || st.batcher->step_in_flight()) return;
  const uint64_t cpu0 = thread_cpu_ns();
  const StepPlan* plan = st.batcher->plan_step();
  if (!plan) return;
  const uint64_t step_id = st.next_step_id++;
  wire_msg step = encode_execute_step(*plan, step_id);
  ++st.steps;
  st.tokens += static_cast<uint64_t>(plan->num_tokens);
  st.prefill_tokens += static_cast<uint64_t>(plan->num_prefill_tokens);
  st.step_is_decode = plan->decode_only();
  st.max_seqs_in_step = std::max<uint32_t>(st.max_seqs_in_step, static_cast<uint32_t>(plan->slices.size()));
  st.step_sent = std::chrono::steady_clock::now();
  st.own_ns += thread_cpu_ns() - cpu0;
  self->request(st.worker, caf::infinite, step_atom::value, std::move(step))
      .then([=](const wire_msg& result) { on_step_result(self, result); },
            [=](const caf::error& err) {
              const std::string why = "worker unreachable: " + self->system().render(err);
              spdlog::error("{}: {}", self->state.actor_name, why);
              emit(self, self->state.batcher->on_step_failed(why));
              maybe_step(self);
            });
}

void handle_submit(self_ptr self, const caf::actor& sink, const wire_msg& msg) {
  SequenceRequest req;
  try {
    WireReader reader(msg);
    auto in = reader.root<wire::SubmitRequest>();
    req.id = in.getRequestId();
    req.prompt = to_vector<int32_t>(in.getPromptIds());
    req.max_tokens = in.getMaxTokens();
    auto sp = in.getSampling();
    req.sampling = SamplingOptions{sp.getTemperature(), sp.getTopP(), sp.getTopK(), sp.getSeed()};
    req.stop_ids = to_vector<int32_t>(in.getStopIds());
    req.ignore_eos = in.getIgnoreEos();
  } catch (const std::exception& e) {
    spdlog::warn("{}: malformed SubmitRequest dropped: {}", self->state.actor_name, e.what());
    return;
  }
  auto& submitters = self->state.submitters;
  auto known = std::find(submitters.begin(), submitters.end(), sink);
  req.owner = static_cast<uint32_t>(known - submitters.begin());
  if (known == submitters.end()) submitters.push_back(sink);
  if (auto refused = self->state.batcher->add(std::move(req))) emit(self, *refused);
  maybe_step(self);
}

caf::behavior scheduler_impl(self_ptr self, SchedulerLimits limits, caf::actor worker, caf::actor kv_pool,
                             std::string name) {
  auto& st = self->state;
  st.actor_name = std::move(name);
  st.worker = std::move(worker);
  st.kv_pool = std::move(kv_pool);
  st.batcher = std::make_unique<BatchScheduler>(limits, st.lease);
  wire_msg lease_req = build<wire::KvLeaseRequest>([&](wire::KvLeaseRequest::Builder out) {
    out.setCorrelationId(1);
    out.setHolder(st.actor_name);
    out.setNumBlocks(0);  // the whole pool: one scheduler per pool for now
  });
  self->request(st.kv_pool, caf::infinite, lease_atom::value, std::move(lease_req))
      .then([=](const wire_msg& msg) {
        WireReader reader(msg);
        auto grant = reader.root<wire::KvLeaseGrant>();
        if (has_error(grant.getError())) {
          spdlog::error("{}: no KV lease: {}", self->state.actor_name, std::string(grant.getError().getMessage()));
        }
        auto ids = grant.getBlockIds();
        self->state.lease.add(to_vector<uint32_t>(ids));
        self->state.lease_ready = true;
        spdlog::debug("{}: leased {} KV blocks", self->state.actor_name, ids.size());
        auto pending = std::move(self->state.pending);
        for (auto& [sink, m] : pending) handle_submit(self, sink, m);
      });
  return {
      [=](submit_atom, const wire_msg& msg) {
        auto sink = caf::actor_cast<caf::actor>(self->current_sender());
        if (!self->state.lease_ready) {
          self->state.pending.emplace_back(std::move(sink), msg);
          return;
        }
        handle_submit(self, sink, msg);
      },
      [=](stats_atom, const wire_msg& msg) -> wire_msg {
        WireReader reader(msg);
        const uint64_t correlation = reader.root<wire::StatsRequest>().getCorrelationId();
        const auto& st = self->state;
        return build<wire::SchedulerStats>([&](wire::SchedulerStats::Builder out) {
          out.setCorrelationId(correlation);
          out.setSteps(st.steps);
          out.setTokens(st.tokens);
          out.setSampledTokens(st.sampled);
          out.setRoundTripMicros(st.round_trip_us);
          out.setWorkerComputeMicros(st.compute_us);
          out.setSchedulerMicros(st.own_ns / 1000);
          out.setPreemptions(st.batcher->num_preemptions());
          out.setMaxSeqsInStep(st.max_seqs_in_step);
          out.setPrefillTokens(st.prefill_tokens);
          out.setPrefillMicros(st.prefill_us);
          out.setDecodeTokens(st.decode_tokens);
          out.setDecodeMicros(st.decode_us);
        });
      },
      [=](cancel_atom, const wire_msg& msg) {
        WireReader reader(msg);
        const uint64_t id = reader.root<wire::CancelRequest>().getRequestId();
        if (auto done = self->state.batcher->cancel(id)) emit(self, *done);
      },
  };
}

}  // namespace

caf::actor spawn_scheduler(caf::actor_system& system, const SchedulerLimits& limits, caf::actor worker,
                           caf::actor kv_pool, std::string name) {
  return system.spawn(scheduler_impl, limits, std::move(worker), std::move(kv_pool), std::move(name));
}

}  // namespace actord
