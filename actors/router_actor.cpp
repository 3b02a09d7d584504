#include "actors/router_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include <deque>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "actors/tell.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "core/sampling_options.hpp"
#include "core/scheduler_stats.hpp"

namespace actord {
namespace {

constexpr size_t kRecentCancels = 4096;  // cancels remembered for continuations still on their way

struct Known {
  caf::actor scheduler;
  uint64_t replica = 0;
  bool routed = false;     // takes new requests
  SchedulerStats last;     // its statistics when last asked
};

struct Waiting {
  caf::actor owner;
  wire_msg submit;
  uint64_t id = 0;
  uint32_t samples = 1;
};

struct router_state {
  std::unique_ptr<ReplicaRouter> router;
  std::vector<Known> known;               // every scheduler joined and not down
  std::deque<Waiting> waiting;            // requests with no replica to go to yet
  SchedulerStats gone;                    // counters of schedulers that went down
  std::unordered_set<uint64_t> cancelled; // recent cancels (sample ids), in `cancel_order`
  std::deque<uint64_t> cancel_order;
  static inline const char* name = "router";
};

using self_ptr = router_actor::stateful_pointer<router_state>;

Known* find(router_state& st, const caf::actor_addr& who) {
  for (Known& k : st.known)
    if (k.scheduler.address() == who) return &k;
  return nullptr;
}


// One final delta per sample of request `id`, cancelled, to its owner.
void end_cancelled(self_ptr self, const caf::actor& owner, uint64_t id, uint32_t samples) {
  tell(self, owner, delta_atom::value, build<wire::StreamDeltaBatch>([&](wire::StreamDeltaBatch::Builder out) {
               auto deltas = out.initDeltas(samples);
               for (uint32_t s = 0; s < samples; ++s) {
                 deltas[s].setRequestId(id + s);
                 deltas[s].setFinishReason(wire::FinishReason::CANCELLED);
               }
             }));
}

// Sends `submit` on to a replica as `owner`, or keeps it waiting when none takes requests.
void route(self_ptr self, const caf::actor& owner, wire_msg submit) {
  auto& st = self->state;
  uint64_t id = 0;
  uint32_t samples = 1;
  std::optional<uint64_t> replica;
  try {
    WireReader reader(submit);
    auto in = reader.root<wire::SubmitRequest>();
    id = in.getRequestId();
    samples = SamplingOptions::samples_of(in.getSampling().getN());
    if (st.router->empty()) {
      st.waiting.push_back(Waiting{owner, std::move(submit), id, samples});
      return;
    }
    auto prompt = in.getPromptIds();
    thread_local std::vector<int32_t> ids;
    ids.clear();
    const auto resumed = in.getResumeIds();
    ids.reserve(prompt.size() + resumed.size());
    for (int32_t t : prompt) ids.push_back(t);
    for (int32_t t : resumed) ids.push_back(t);
    const auto phase = resumed.size() > 0 ? ReplicaRouter::Phase::decode : ReplicaRouter::Phase::prefill;
    replica = st.router->route(ids, in.getMaxTokens() - std::min<uint32_t>(in.getMaxTokens(), resumed.size()), samples,
                               phase);
  } catch (const std::exception& e) {
    spdlog::warn("router: malformed SubmitRequest dropped: {}", e.what());
    return;
  }
  for (const Known& k : st.known) {
    if (k.replica == *replica && k.routed) {
      caf::send_as(owner, k.scheduler, submit_atom::value, std::move(submit));
      return;
    }
  }
  spdlog::error("router: replica {} chosen but not known", *replica);
}

void flush_waiting(self_ptr self) {
  auto& st = self->state;
  while (!st.waiting.empty() && !st.router->empty()) {
    Waiting w = std::move(st.waiting.front());
    st.waiting.pop_front();
    route(self, w.owner, std::move(w.submit));
  }
}

void remember_cancel(router_state& st, uint64_t id) {
  if (!st.cancelled.insert(id).second) return;
  st.cancel_order.push_back(id);
  if (st.cancel_order.size() > kRecentCancels) {
    st.cancelled.erase(st.cancel_order.front());
    st.cancel_order.pop_front();
  }
}

router_actor::behavior_type router_impl(self_ptr self, PhasePolicies policies, int block_size) {
  self->state.router = std::make_unique<ReplicaRouter>(policies, block_size);
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    auto it = std::find_if(st.known.begin(), st.known.end(),
                           [&](const Known& k) { return k.scheduler.address() == msg.source; });
    if (it == st.known.end()) return;
    if (it->routed) st.router->remove(it->replica);
    add_stats(st.gone, it->last, /*counters_only=*/true);
    st.known.erase(it);
  });
  return {
      [=](submit_atom, wire_msg& msg) {
        route(self, caf::actor_cast<caf::actor>(self->current_sender()), std::move(msg));
      },
      [=](requeue_atom, const caf::actor& owner, wire_msg& msg) {
        auto& st = self->state;
        uint64_t id = 0;
        uint32_t samples = 1;
        try {
          WireReader reader(msg);
          auto in = reader.root<wire::SubmitRequest>();
          id = in.getRequestId();
          samples = SamplingOptions::samples_of(in.getSampling().getN());
        } catch (const std::exception& e) {
          spdlog::warn("router: malformed continuation dropped: {}", e.what());
          return;
        }
        if (st.cancelled.count(id)) {
          end_cancelled(self, owner, id, samples);
          return;
        }
        route(self, owner, std::move(msg));
      },
      [=](cancel_atom, const wire_msg& msg) {
        auto& st = self->state;
        uint64_t id = 0;
        try {
          WireReader reader(msg);
          id = reader.root<wire::CancelRequest>().getRequestId();
        } catch (const std::exception& e) {
          spdlog::warn("router: malformed CancelRequest dropped: {}", e.what());
          return;
        }
        remember_cancel(st, id);
        for (auto w = st.waiting.begin(); w != st.waiting.end(); ++w) {
          if (w->id != id) continue;
          end_cancelled(self, w->owner, w->id, w->samples);
          st.waiting.erase(w);
          return;
        }
        for (const Known& k : st.known) caf::send_as(caf::actor_cast<caf::actor>(self->current_sender()),
                                                     k.scheduler, cancel_atom::value, msg);
      },
      [=](join_atom, uint64_t replica, const caf::actor& scheduler, bool warm_in, uint32_t role) {
        auto& st = self->state;
        if (Known* k = find(st, scheduler.address())) {
          k->routed = true;
        } else {
          st.known.push_back(Known{scheduler, replica, true, {}});
          self->monitor(scheduler);
        }
        const auto replica_role = role <= uint32_t(ReplicaRole::decode) ? ReplicaRole(role) : ReplicaRole::both;
        st.router->add(replica, warm_in, replica_role);
        spdlog::info("router: replica {} takes requests ({} in all{}{})", replica, st.router->size(),
                     replica_role == ReplicaRole::both ? "" : std::string(", ") + replica_role_name(replica_role),
                     st.router->weight(replica) < 1.0 ? ", warming in" : "");
        flush_waiting(self);
      },
      // Answered once nothing more goes to `scheduler`: whatever the router sent it is in its mailbox already.
      [=](leave_atom, const caf::actor& scheduler) -> bool {
        auto& st = self->state;
        Known* k = find(st, scheduler.address());
        if (!k || !k->routed) return true;
        k->routed = false;
        st.router->remove(k->replica);
        spdlog::info("router: replica {} takes no new requests ({} left)", k->replica, st.router->size());
        return true;
      },
      [=](load_atom, uint64_t tokens) {
        auto& st = self->state;
        if (Known* k = find(st, caf::actor_cast<caf::actor_addr>(self->current_sender())); k && k->routed) st.router->report_load(k->replica, tokens);
      },
      [=](policy_atom, uint32_t prefill, uint32_t decode) {
        const uint32_t last = uint32_t(RoutePolicy::prefix_affinity);
        if (prefill > last || decode > last) return;
        const PhasePolicies policies{RoutePolicy(prefill), RoutePolicy(decode)};
        if (self->state.router->policies() == policies) return;
        self->state.router->set_policies(policies);
        spdlog::info("router: prefill requests by {}, decode by {}", route_policy_name(policies.prefill),
                     route_policy_name(policies.decode));
      },
      [=](stats_atom, const wire_msg& msg) -> caf::result<wire_msg> {
        auto& st = self->state;
        uint64_t correlation = 0;
        try {
          WireReader reader(msg);
          correlation = reader.root<wire::StatsRequest>().getCorrelationId();
        } catch (const std::exception&) {
        }
        // Each scheduler counts once: in `gone` if it went down before the answer is made (its last counters moved
        // there, whether or not it answered first), else by its answer (or its last counters if it gave none). A
        // total taken from `gone` when the asks went out lost a scheduler that went down while asked.
        struct Gather {
          std::vector<std::pair<caf::actor_addr, std::optional<SchedulerStats>>> answers;
          size_t left = 0;
        };
        auto gather = std::make_shared<Gather>();
        gather->left = st.known.size();
        auto rp = self->make_response_promise<wire_msg>();
        auto finish = [=]() mutable {
          auto& st = self->state;
          SchedulerStats total = st.gone;
          for (const auto& [who, answer] : gather->answers) {
            const Known* k = find(st, who);
            if (!k) continue;  // down since: in `gone`
            if (answer) add_stats(total, *answer);
            else add_stats(total, k->last, true);
          }
          total.waiting_seqs += st.waiting.size();
          rp.deliver(build<wire::SchedulerStats>([&](wire::SchedulerStats::Builder out) {
            to_wire(total, out);
            out.setCorrelationId(correlation);
          }));
        };
        if (gather->left == 0) {
          finish();
          return rp;
        }
        for (const Known& k : st.known) {
          const caf::actor_addr who = k.scheduler.address();
          self->request(k.scheduler, std::chrono::seconds(10), stats_atom::value, msg)
              .then(
                  [=](const wire_msg& reply) mutable {
                    WireReader reader(reply);
                    const SchedulerStats s = from_wire(reader.root<wire::SchedulerStats>());
                    if (Known* k = find(self->state, who)) k->last = s;
                    gather->answers.emplace_back(who, s);
                    if (--gather->left == 0) finish();
                  },
                  [=](const caf::error&) mutable {
                    gather->answers.emplace_back(who, std::nullopt);
                    if (--gather->left == 0) finish();
                  });
        }
        return rp;
      },
      [=](stats_atom, const caf::actor& scheduler, const wire_msg& msg) {
        try {
          WireReader reader(msg);
          if (Known* k = find(self->state, scheduler.address())) k->last = from_wire(reader.root<wire::SchedulerStats>());
        } catch (const std::exception& e) {
          spdlog::warn("router: malformed final statistics dropped: {}", e.what());
        }
        return true;
      },
  };
}

}  // namespace

router_actor spawn_router(caf::actor_system& system, PhasePolicies policies, int block_size) {
  return system.spawn(router_impl, policies, block_size);
}

}  // namespace actord
