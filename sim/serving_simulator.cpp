#include "sim/serving_simulator.hpp"

#include <cstdint>
#include <memory>
#include <queue>

#include "memory/block_allocator.hpp"
#include "scheduler/replica_router.hpp"
#include "scheduler/step_shape.hpp"

namespace actord::sim {
namespace {

constexpr int32_t kToken = 5;  // every token the simulated replicas "sample": no stop id, requests end by length

struct Replica {
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

enum class EventKind { arrival, step_done, hand_off };
struct Event {
  double at = 0;
  uint64_t order = 0;  // ties in the order the events were made
  EventKind kind = EventKind::arrival;
  size_t index = 0;    // step_done: the replica; hand_off: into hand_offs
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
      for (int r = 0; r < group.replicas; ++r) {
        Replica rep;
        rep.cost = &group.cost;
        rep.blocks = std::make_unique<BlockAllocator>(group.kv_blocks);
        rep.batcher = std::make_unique<BatchScheduler>(limits, *rep.blocks);
        rep.stats.group = group.name;
        router_.add(replicas_.size(), false, group.role);
        replicas_.push_back(std::move(rep));
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
      }
      send_due();  // arrivals due now, and those a request that ended let through
    }
    for (const Replica& r : replicas_) report_.replicas.push_back(r.stats);
    return std::move(report_);
  }

 private:
  void push(double at, EventKind kind, size_t index) { events_.push(Event{at, order_++, kind, index}); }

  // Sends the requests whose time has come while the concurrency has room, in order; wakes at the next one's time.
  void send_due() {
    bool sent = false;
    while (next_ < requests_.size() && in_flight_ < concurrency_ && requests_[next_].arrival_s <= now_) {
      send(next_++);
      sent = true;
    }
    if (sent)  // once every request of this instant is in: those arriving together share the first step
      for (size_t r = 0; r < replicas_.size(); ++r) kick(r);
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
  }
  if (replicas == 0) return Error{Errc::invalid_argument, "the fleet has no replicas"};
  for (size_t i = 1; i < requests.size(); ++i)
    if (requests[i].arrival_s < requests[i - 1].arrival_s)
      return Error{Errc::invalid_argument, "request " + std::to_string(i) + " arrives before the one before it"};
  return Simulation(fleet, requests, concurrency).run();
}

}  // namespace actord::sim
