// groups[i].autoscale carried out by the coordinator (coordinator_state.hpp: arm_autoscale, autoscale_tick): every
// interval, each autoscaled group's serving schedulers are asked for their running and waiting sequences, the
// group's Autoscaler (scheduler/autoscaler.hpp) looks at the sum, and a group that wants another size is scaled as
// actord scale would.
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "actors/coordinator_state.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

namespace actord::coord {
namespace {

// The shortest autoscale.interval of the groups; none when no group autoscales.
std::optional<std::chrono::milliseconds> next_interval(const coordinator_state& st) {
  std::optional<std::chrono::milliseconds> out;
  for (const CoordinatorParams& g : st.groups) {
    const AutoscaleSection& a = g.group().autoscale;
    if (a.active()) out = out ? std::min(*out, a.interval) : a.interval;
  }
  return out;
}

// The group's settings with target_sequences resolved (0: half of max_num_seqs).
AutoscaleSection settings_of(const CoordinatorParams& g) {
  return resolved_autoscale(g.group().autoscale, g.limits.max_num_seqs);
}

// One group's load being gathered from its schedulers.
struct Look {
  size_t group = 0;
  int replicas = 0;         // its replicas not draining
  GroupLoad load;           // summed over those that answered
  size_t left = 0;          // schedulers yet to answer
  bool complete = true;     // every one answered
};

void decide(self_ptr self, const Look& look) {
  auto& st = self->state;
  if (st.scaling || !look.complete || look.group >= st.autoscalers.size() || !st.autoscalers[look.group]) return;
  Autoscaler& scaler = *st.autoscalers[look.group];
  const std::optional<int> want = scaler.look(std::chrono::steady_clock::now(), look.replicas, look.load);
  const std::string name = st.groups.at(look.group).group().name;
  const AutoscaleSection& s = scaler.settings();
  st.autoscale_looks.at(look.group) =
      "group " + name + ": " + std::to_string(look.load.sequences) + " sequences" +
      (s.target_prompt_tokens > 0 ? ", " + std::to_string(look.load.prefill_backlog) + " prompt tokens to prefill," : "") +
      " in " + std::to_string(look.replicas) + " replicas (" + std::to_string(s.target_sequences) + " sequences" +
      (s.target_prompt_tokens > 0 ? " or " + std::to_string(s.target_prompt_tokens) + " prompt tokens" : "") +
      " each, " + std::to_string(s.min_replicas) + " to " +
      std::to_string(s.max_replicas) + " replicas)" + (want ? ", scaling to " + std::to_string(*want) : "");
  if (!want || *want == look.replicas) return;
  spdlog::info("coordinator: autoscale: {}", st.autoscale_looks[look.group]);
  scale_group(self, look.group, *want, [=](uint32_t code, const std::string& message) {
    if (code == kCoordinatorOk) spdlog::info("coordinator: autoscale: {}", message);
    else spdlog::warn("coordinator: autoscale of group {} to {} replicas failed: {}", name, *want, message);
  });
}

}  // namespace

void arm_autoscale(self_ptr self) {
  auto& st = self->state;
  if (st.autoscale_armed) return;
  const auto interval = next_interval(st);
  if (!interval) return;
  st.autoscale_armed = true;
  self->delayed_send(self, *interval, autoscale_atom::value);
}

void autoscale_tick(self_ptr self) {
  auto& st = self->state;
  st.autoscale_armed = false;
  arm_autoscale(self);
  st.autoscalers.resize(st.groups.size());
  st.autoscale_looks.resize(st.groups.size());
  std::vector<size_t> groups;
  for (size_t gi = 0; gi < st.groups.size(); ++gi) {
    auto& scaler = st.autoscalers[gi];
    if (!st.groups[gi].group().autoscale.active()) {  // none, or an apply took it away
      scaler.reset();
      st.autoscale_looks[gi].clear();
      continue;
    }
    const AutoscaleSection settings = settings_of(st.groups[gi]);
    if (!scaler || !(scaler->settings() == settings)) scaler.emplace(settings);
    groups.push_back(gi);
  }
  if (st.scaling) return;
  const auto timeout = next_interval(st).value_or(std::chrono::milliseconds(1000));
  const wire_msg request = stats_request(0);
  for (size_t gi : groups) {
    auto look = std::make_shared<Look>();
    look->group = gi;
    std::vector<scheduler_actor> schedulers;
    bool settled = true;  // every replica serving: one starting or rebuilding has no load to tell yet
    for (const auto& [index, r] : st.replicas) {
      if (!r.params || r.params->group_index != gi || r.state == ReplicaState::draining) continue;
      ++look->replicas;
      if (r.state == ReplicaState::failed) continue;  // retried in the background: a member, with no load
      if (r.state != ReplicaState::serving || !r.scheduler) settled = false;
      else schedulers.push_back(r.scheduler);
    }
    if (!settled || schedulers.empty()) continue;
    look->left = schedulers.size();
    for (const scheduler_actor& scheduler : schedulers) {
      self->request(scheduler, timeout, stats_atom::value, request)
          .then(
              [=](const wire_msg& reply) {
                WireReader reader(reply);
                const SchedulerStats s = from_wire(reader.root<wire::SchedulerStats>());
                look->load.sequences += s.running_seqs + s.waiting_seqs;
                look->load.prefill_backlog += s.prefill_backlog;
                if (--look->left == 0) decide(self, *look);
              },
              [=](const caf::error&) {
                look->complete = false;
                if (--look->left == 0) decide(self, *look);
              });
    }
  }
}

}  // namespace actord::coord
