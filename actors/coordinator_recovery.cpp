// A replica that lost a rank (coordinator_state.hpp: recover, rebuild, probed, keep_last_stats): its sequences go back
// to the router, its last statistics to the router's totals, and it is rebuilt as a new incarnation; rebuilds that
// keep failing are retried with a doubling wait (rebuild_backoff.hpp), those of a replica on other nodes only once
// their agents answer, asked from a detached probe actor.
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "actors/coordinator_state.hpp"
#include "actors/node_agent.hpp"
#include "actors/rebuild_backoff.hpp"
#include "comms/codecs.hpp"

namespace actord::coord {

constexpr auto kLostAnswerTimeout = std::chrono::seconds(5);
constexpr auto kAgentProbeTimeout = std::chrono::seconds(2);

// Hands the scheduler's last statistics to the router, which keeps them in its totals once the scheduler is gone
// (a retired or rebuilt replica's counters stay in /metrics), then runs `then`; on any error `then` all the same.
void keep_last_stats(self_ptr self, const scheduler_actor& scheduler, std::function<void()> then) {
  if (!scheduler || !self->state.router) return then();
  self->request(scheduler, kLostAnswerTimeout, stats_atom::value, stats_request(0))
      .then(
          [=](const wire_msg& stats) {
            if (!self->state.router) return then();
            self->request(self->state.router, kLostAnswerTimeout, stats_atom::value,
                          caf::actor_cast<caf::actor>(scheduler), stats)
                .then([=](bool) { then(); }, [=](const caf::error&) { then(); });
          },
          [=](const caf::error&) { then(); });
}

// A rank of replica `index` went down: its sequences go back to the router, and it is rebuilt.
void recover(self_ptr self, int index, const std::string& why) {
  auto& st = self->state;
  Replica& r = st.replicas.at(index);
  if (r.state == ReplicaState::draining) {  // its drain answers once the scheduler handed everything back
    if (r.scheduler) caf::anon_send(r.scheduler, lost_atom::value, why);
    return;
  }
  if (r.state != ReplicaState::serving) return;  // a failed start or rebuild is handled by its own callback
  spdlog::error("coordinator: replica/{} lost a rank ({}): rebuilding it", index, why);
  r.state = ReplicaState::rebuilding;
  r.last_failure = why;
  ++st.replacements;
  const uint32_t incarnation = r.incarnation;
  after_leaving_router(self, r.scheduler, [=] {
    Replica* r = current(self, index, incarnation);
    if (!r) return;
    const scheduler_actor scheduler = r->scheduler;
    self->request(scheduler, kLostAnswerTimeout, lost_atom::value, why)
        .then(
            [=](const std::string& cause) {
              if (Replica* r = current(self, index, incarnation)) r->last_failure = cause;
              keep_last_stats(self, scheduler, [=] { rebuild(self, index, incarnation); });
            },
            [=](const caf::error&) { rebuild(self, index, incarnation); });
  });
}

namespace {

// A rebuild of replica `index` failed (`why`): the next attempt after rebuild_delay, the replica marked failed once
// the quick attempts are spent.
void retry_rebuild_later(self_ptr self, Replica& r, uint32_t incarnation, const std::string& why) {
  r.last_failure = why;
  const int failed = ++r.failed_rebuilds;
  const auto wait = rebuild_delay(failed, r.params->topology.engine.rebuild_retry_max);
  const double seconds = std::chrono::duration<double>(wait).count();
  if (rebuilds_exhausted(failed)) {
    r.state = ReplicaState::failed;
    spdlog::error("coordinator: replica/{} could not be rebuilt ({} attempts), again in {:.0f} s: {}", r.index, failed,
                  seconds, why);
  } else {
    spdlog::warn("coordinator: rebuilding replica/{} failed, again in {:.0f} s: {}", r.index, seconds, why);
  }
  self->delayed_send(self, wait, rebuild_atom::value, r.index, incarnation);
}

void attempt_rebuild(self_ptr self, int index, uint32_t incarnation) {
  Replica* r = current(self, index, incarnation);
  if (!r) return;
  stop_replica_actors(self, *r);
  ++r->incarnation;
  if (r->state != ReplicaState::failed) r->state = ReplicaState::rebuilding;  // failed: until an attempt succeeds
  const uint32_t next = r->incarnation;
  build_replica(self, index, [=](std::optional<Error> failure) {
    Replica* r = current(self, index, next);
    if (!r) return;
    if (!failure) {
      const bool was_failed = r->state == ReplicaState::failed;
      spdlog::info("coordinator: replica/{} rebuilt (incarnation {}){}", index, next,
                   r->failed_rebuilds ? " after " + std::to_string(r->failed_rebuilds) + " failed attempts" : "");
      r->failed_rebuilds = 0;
      // Back after an outage its group served without it: a full share at once, as an added replica.
      if (was_failed) join_at_full_share(self, {index});
      else join_router(self, *r);
      return;
    }
    retry_rebuild_later(self, *r, next, failure->message);
  });
}

}  // namespace

// A replica placed on other nodes is rebuilt once their agents answer, asked off the coordinator's thread (an agent
// that is down costs a timeout, and building a group across nodes asks them from here): the answer comes back as
// (rebuild_atom, index, incarnation, why), why empty when every one answered; an agent that does not counts as a
// failed attempt.
void rebuild(self_ptr self, int index, uint32_t incarnation) {
  Replica* r = current(self, index, incarnation);
  if (!r) return;
  std::vector<std::string> agents;
  for (const std::string& agent : place_of(*r->params, r->plan_slot))
    if (!agent.empty() && std::find(agents.begin(), agents.end(), agent) == agents.end()) agents.push_back(agent);
  if (agents.empty()) return attempt_rebuild(self, index, incarnation);
  const auto me = caf::actor_cast<coordinator_actor>(self);
  self->system().spawn<caf::detached>([=](caf::event_based_actor* probe) {
    std::string why;
    for (const std::string& agent : agents)
      if (auto port = NodeAgentClient(agent, kAgentProbeTimeout).free_port(); !port) {
        why = port.error().message;
        break;
      }
    caf::anon_send(me, rebuild_atom::value, index, incarnation, why);
    probe->quit();
  });
}

void probed(self_ptr self, int index, uint32_t incarnation, const std::string& why) {
  Replica* r = current(self, index, incarnation);
  if (!r) return;
  if (why.empty()) return attempt_rebuild(self, index, incarnation);
  stop_replica_actors(self, *r);  // what is left of the lost incarnation
  retry_rebuild_later(self, *r, incarnation, why);
}

}  // namespace actord::coord
