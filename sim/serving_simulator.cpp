#include "sim/serving_simulator.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <queue>

#include "memory/block_allocator.hpp"
#include "scheduler/autoscaler.hpp"
#include "scheduler/replica_router.hpp"
#include "scheduler/step_shape.hpp"

namespace actord::sim {
namespace {

constexpr int32_t kToken = 5;  // every token the simulated replicas "sample": no stop id, requests end by length

struct Replica {
  size_t group = 0;
  bool routed = true;  // takes requests (false once autoscaling retired it: it finishes what runs)
  const StepCostModel* cost = nullptr;
  std::unique_ptr<BlockAllocator> blocks;
  std::unique_ptr<BatchScheduler> batcher;
  bool busy = false;
  std::vector<uint64_t> sampling;  // the step in flight's sampling slices, in plan order
  SimReplicaStats stats;
};

struct HandOffInFlight {
  size_t from = 0;
  SequenceRequest continuation;
  int kv_tokens = 0;
};

enum class EventKind { arrival, step_done, hand_off, autoscale_look, replicas_ready };
struct Event {
  double at = 0;
  uint64_t order = 0;  // ties in the order the events were made
  EventKind kind = EventKind::arrival;
  size_t index = 0;    // step_done: the replica; hand_off: into hand_offs; autoscale_look, replicas_ready: the group
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
};

class Simulation {
 public:
  Simulation(const SimFleet& fleet, const std::vector<SimRequest>& requests, int concurrency)
      : fleet_(fleet), requests_(requests), concurrency_(concurrency), router_(fleet.router, fleet.block_size) {
    report_.requests.resize(requests.size());
    for (size_t g = 0; g < fleet.groups.size(); ++g) {
      const SimReplicaGroup& group = fleet.groups[g];
      SchedulerLimits limits = group.limits;
      limits.plan_ahead = false;  // one step at a time: its priced time already holds the engine's overlap
      limits.speculative = {};
      limits.pool_blocks = group.kv_blocks;
      limits.hand_off_prefilled = group.role == ReplicaRole::prefill;
      limits_.push_back(limits);
      for (int r = 0; r < group.replicas; ++r) add_replica(g);
      scalers_.emplace_back();
      pending_.push_back(0);
      if (group.autoscale.active()) {
        scalers_.back().emplace(group.autoscale);
        push(seconds(group.autoscale.interval), EventKind::autoscale_look, g);
      }
    }
  }

  SimReport run() {
    send_due();
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.at;
      switch (e.kind) {
        case EventKind::arrival: break;
        case EventKind::step_done: step_done(e.index); break;
        case EventKind::hand_off: hand_off_arrives(e.index); break;
        case EventKind::autoscale_look: autoscale_look(e.index); break;
        case EventKind::replicas_ready: replicas_ready(e.index); break;
      }
      send_due();  // arrivals due now, and those a request that ended let through
    }
    for (const Replica& r : replicas_) report_.replicas.push_back(r.stats);
    return std::move(report_);
  }

 private:
  void push(double at, EventKind kind, size_t index) { events_.push(Event{at, order_++, kind, index}); }
  static double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

  // A replica of group g that takes requests from now on (at a full share).
  void add_replica(size_t g) {
    const SimReplicaGroup& group = fleet_.groups[g];
    Replica rep;
    rep.group = g;
    rep.cost = &group.cost;
    rep.blocks = std::make_unique<BlockAllocator>(group.kv_blocks);
    rep.batcher = std::make_unique<BatchScheduler>(limits_[g], *rep.blocks);
    rep.stats.group = group.name;
    router_.add(replicas_.size(), false, group.role);
    replicas_.push_back(std::move(rep));
  }

  std::vector<size_t> routed_of(size_t g) const {
    std::vector<size_t> out;
    for (size_t r = 0; r < replicas_.size(); ++r)
      if (replicas_[r].group == g && replicas_[r].routed) out.push_back(r);
    return out;
  }

  // Sequences a replica handed back, routed again (a continuation with tokens in its decode phase); the caller
  // starts the replicas' steps (kick_all).
  void route_again(HandBack back) {
    for (SequenceRequest& seq : back.requests) {
      const auto phase = seq.resumed.empty() ? ReplicaRouter::Phase::prefill : ReplicaRouter::Phase::decode;
      const auto to = router_.route(seq.prompt, seq.max_tokens, 1, phase);
      if (!to) {
        finish(size_t(seq.id - 1), "no replica takes requests");
        continue;
      }
      add(*to, std::move(seq), {}, 0);
    }
  }

  void kick_all() {
    for (size_t r = 0; r < replicas_.size(); ++r) kick(r);
  }

  // The coordinator's look at group g (coordinator_autoscale.cpp), while requests remain to be served.
  void autoscale_look(size_t g) {
    if (next_ == requests_.size() && in_flight_ == 0) return;  // the run is over: no more looks
    const AutoscaleSection& settings = fleet_.groups[g].autoscale;
    push(now_ + seconds(settings.interval), EventKind::autoscale_look, g);
    if (pending_[g] > 0) return;  // replicas being added: the coordinator does not look while it scales
    const std::vector<size_t> routed = routed_of(g);
    GroupLoad load;
    for (size_t r : routed) {
      const BatchScheduler& b = *replicas_[r].batcher;
      load.sequences += b.num_running() + b.num_waiting();
      load.prefill_backlog += b.prefill_backlog();
    }
    const auto at = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(now_)));
    const int have = static_cast<int>(routed.size());
    const std::optional<int> want = scalers_[g]->look(at, have, load);
    if (!want || *want == have) return;
    if (*want > have) {
      pending_[g] = *want - have;
      push(now_ + fleet_.groups[g].start_s, EventKind::replicas_ready, g);
      return;
    }
    // Fewer: the highest-numbered leave the router, hand back what waits and finish what runs.
    for (size_t k = routed.size(); k-- > size_t(*want);) {
      Replica& rep = replicas_[routed[k]];
      rep.routed = false;
      router_.remove(routed[k]);
      route_again(rep.batcher->take_waiting());
    }
    kick_all();
    report_.resizes.push_back({now_, fleet_.groups[g].name, have, *want});
  }

  // The replicas the autoscaler added to group g serve: the others hand back what they have not started.
  void replicas_ready(size_t g) {
    const std::vector<size_t> before = routed_of(g);
    for (int k = 0; k < pending_[g]; ++k) add_replica(g);
    report_.resizes.push_back({now_, fleet_.groups[g].name, int(before.size()), int(before.size()) + pending_[g]});
    pending_[g] = 0;
    for (size_t r : before) route_again(replicas_[r].batcher->take_unstarted());
    kick_all();
  }

  // Sends the requests whose time has come while the concurrency has room, in order; wakes at the next one's time.
  void send_due() {
    bool sent = false;
    while (next_ < requests_.size() && in_flight_ < concurrency_ && requests_[next_].arrival_s <= now_) {
      send(next_++);
      sent = true;
    }
    if (sent) kick_all();  // once every request of this instant is in: those arriving together share the first step
    if (next_ < requests_.size() && in_flight_ < concurrency_ && woken_for_ != next_) {
      woken_for_ = next_;
      push(requests_[next_].arrival_s, EventKind::arrival, 0);
    }
  }

  void send(size_t i) {
    const SimRequest& req = requests_[i];
    report_.requests[i].sent_s = now_;
    ++in_flight_;
    SequenceRequest seq;
    seq.id = i + 1;
    seq.prompt = req.prompt;
    seq.max_tokens = req.max_tokens;
    seq.ignore_eos = true;
    seq.sampling.temperature = 0.0f;
    const auto replica = router_.route(seq.prompt, seq.max_tokens);
    if (!replica) return finish(i, "no replica takes requests");
    add(*replica, std::move(seq), {}, 0);
  }

  // Queues a sequence at replica r (the caller starts its step: kick).
  void add(size_t r, SequenceRequest seq, std::vector<uint32_t> kv_blocks, int kv_tokens) {
    const uint64_t id = seq.id;
    if (auto refused = replicas_[r].batcher->add(std::move(seq), std::move(kv_blocks), kv_tokens))
      return finish(size_t(id - 1), refused->error.empty() ? "refused" : refused->error);
  }

  void finish(size_t i, std::string error) {
    report_.requests[i].error = std::move(error);
    --in_flight_;  // the next send_due() may send another
  }

  // Starts replica r's next step when it is idle and has one.
  void kick(size_t r) {
    Replica& rep = replicas_[r];
    if (rep.busy || !rep.batcher->has_work()) return;
    const StepPlan* plan = rep.batcher->plan_step();
    if (!plan) return;
    const StepShape shape = shape_of(*plan);
    rep.sampling.clear();
    for (const PlannedSlice& s : plan->slices)
      if (s.sample) rep.sampling.push_back(s.seq_id);
    const double seconds = rep.cost->predict_us(shape) / 1e6;
    rep.busy = true;
    ++rep.stats.steps;
    rep.stats.busy_s += seconds;
    rep.stats.prefill_tokens += shape.prefill_tokens;
    rep.stats.decode_tokens += shape.decode_tokens;
    push(now_ + seconds, EventKind::step_done, r);
  }

  void step_done(size_t r) {
    Replica& rep = replicas_[r];  // stays busy until its results are taken: requests sent meanwhile wait for kick
    samples_.clear();
    for (uint64_t id : rep.sampling) samples_.push_back(StepSample{id, kToken, std::nullopt});
    bool ended = false;
    for (const SequenceUpdate& u : rep.batcher->on_step_result(samples_)) {
      const size_t i = size_t(u.id - 1);
      for (size_t t = 0; t < u.new_tokens.size(); ++t) report_.requests[i].token_s.push_back(now_);
      report_.end_s = std::max(report_.end_s, u.new_tokens.empty() ? 0.0 : now_);
      if (u.finish == Finish::none) continue;
      ended = true;
      finish(i, u.finish == Finish::error ? u.error : "");
    }
    rep.stats.preemptions = rep.batcher->num_preemptions();
    if (ended) router_.report_load(r, rep.batcher->outstanding_tokens());
    for (HandOff& h : rep.batcher->take_handed_off()) {
      ++rep.stats.handoffs;
      const double delay = (fleet_.handoff.fixed_us + fleet_.handoff.per_token_us * double(h.kv_tokens)) / 1e6;
      hand_offs_.push_back({r, std::move(h.continuation), h.kv_tokens});
      push(now_ + delay, EventKind::hand_off, hand_offs_.size() - 1);
    }
    rep.busy = false;
    kick(r);
  }

  // A prefilled sequence reaches its decode replica (its KV read out of the prefill replica, which frees it).
  void hand_off_arrives(size_t k) {
    HandOffInFlight& h = hand_offs_[k];
    replicas_[h.from].batcher->release_handed_off(h.continuation.id);
    kick(h.from);
    const auto to = router_.route(h.continuation.prompt, h.continuation.max_tokens, 1, ReplicaRouter::Phase::decode);
    if (!to) return finish(size_t(h.continuation.id - 1), "no replica takes requests");
    auto blocks = replicas_[*to].batcher->take_blocks(h.kv_tokens);
    if (blocks) add(*to, std::move(h.continuation), std::move(*blocks), h.kv_tokens);
    else add(*to, std::move(h.continuation), {}, 0);  // no room for its KV: recomputed there
    kick(*to);
  }

  const SimFleet& fleet_;
  const std::vector<SimRequest>& requests_;
  const int concurrency_;
  ReplicaRouter router_;
  std::vector<Replica> replicas_;
  std::vector<SchedulerLimits> limits_;                 // of each group's batchers
  std::vector<std::optional<Autoscaler>> scalers_;      // of each group with autoscale
  std::vector<int> pending_;                            // of each group: replicas being added
  std::vector<HandOffInFlight> hand_offs_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<StepSample> samples_;
  SimReport report_;
  double now_ = 0;
  uint64_t order_ = 0;
  size_t next_ = 0;
  int in_flight_ = 0;
  size_t woken_for_ = SIZE_MAX;  // the request an arrival event is pending for
};

}  // namespace

Result<SimReport> simulate(const SimFleet& fleet, const std::vector<SimRequest>& requests, int concurrency) {
  if (concurrency < 1) return Error{Errc::invalid_argument, "concurrency must be at least 1"};
  int replicas = 0;
  for (const SimReplicaGroup& g : fleet.groups) {
    if (g.replicas < 0) return Error{Errc::invalid_argument, "group '" + g.name + "': replicas below 0"};
    replicas += g.replicas;
    if (g.replicas > 0 && g.kv_blocks == 0)
      return Error{Errc::invalid_argument, "group '" + g.name + "': no KV blocks"};
    if (g.replicas > 0 && g.cost.knots().size() < 2)
      return Error{Errc::invalid_argument, "group '" + g.name + "': no cost model"};
    if (g.autoscale.active() && (g.replicas < g.autoscale.min_replicas || g.replicas > g.autoscale.max_replicas ||
                                 g.autoscale.interval.count() <= 0 || g.kv_blocks == 0 || g.cost.knots().size() < 2))
      return Error{Errc::invalid_argument, "group '" + g.name + "': autoscaled, it needs KV blocks, a cost model, an "
                                           "interval and replicas within its bounds"};
  }
  if (replicas == 0) return Error{Errc::invalid_argument, "the fleet has no replicas"};
  for (size_t i = 1; i < requests.size(); ++i)
    if (requests[i].arrival_s < requests[i - 1].arrival_s)
      return Error{Errc::invalid_argument, "request " + std::to_string(i) + " arrives before the one before it"};
  return Simulation(fleet, requests, concurrency).run();
}

}  // namespace actord::sim
