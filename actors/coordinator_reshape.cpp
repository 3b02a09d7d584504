// actord apply's rolling reshape (coordinator_actor.hpp, reshape_atom): each group's plan of reshape_plan.hpp
// carried out one step at a time, group after group; when a step fails, it and the groups done before are rolled back.
#include <spdlog/spdlog.h>

#include <chrono>
#include <span>

#include "actors/coordinator_state.hpp"
#include "actors/reshape_plan.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

namespace actord::coord {
namespace {

// Whether replicas built from `b` would be built exactly as those from `a` (the same LoRA adapters; only keys that
// are not the replicas' own may differ: the replicas count, the router policy, autoscale, oversubscribe): a reshape
// then adds or retires replicas and leaves the others alone.
bool same_shape(const CoordinatorParams& a, const CoordinatorParams& b) {
  GroupSection ga = a.group(), gb = b.group();
  ga.replicas = gb.replicas = 0;
  ga.router = gb.router = {};        // the router's, changed there (policy_atom)
  ga.autoscale = gb.autoscale = {};  // the coordinator's (coordinator_autoscale.cpp)
  ga.oversubscribe = gb.oversubscribe = false;  // the engine's check of the machine's cores
  return ga == gb && a.topology.lora == b.topology.lora && a.limits.max_num_seqs == b.limits.max_num_seqs &&
         a.limits.max_num_batched_tokens == b.limits.max_num_batched_tokens && a.num_kv_blocks == b.num_kv_blocks &&
         a.limits.swap_blocks == b.limits.swap_blocks && a.rank_threads == b.rank_threads;
}

// One group's part of an apply: its steps (reshape_plan.hpp), planned when its turn comes (the groups before it took
// replica indices meanwhile), carried out one at a time; after a failed step, or a later group's, the steps undoing
// those done.
struct GroupPass {
  std::shared_ptr<const CoordinatorParams> from, to;  // the group's shape before and after
  std::vector<ReshapeStep> steps;
  size_t done = 0;
  bool planned = false;
  bool rolling_back = false;
  std::chrono::steady_clock::time_point t0;
  std::optional<double> first_serving_ms;  // when the first replica of the new shape took requests
  std::string summary;                     // once done: "group G reshaped in N steps: ..."
  std::map<int, int> plan_slot;            // of each replica a step builds (index -> its plan's replica)
  std::map<int, int> retired_slot;         // of each replica retired (a rollback builds its like there again)

  size_t group() const { return to->group_index; }
};

// An apply being carried out: the groups one after another, in the topology's order; when a step fails, the groups
// done so far are rolled back too, the last first, so that the apply is all or nothing.
struct Reshape {
  std::vector<GroupPass> passes;
  size_t current = 0;  // the pass being carried out (or rolled back)
  bool rolling_back = false;
  std::string failure;  // the failed step's error, while rolling back
  bool several_groups = false;
  PhasePolicies policies_before, policies_after;  // the router's
  std::chrono::steady_clock::time_point t0;
  caf::typed_response_promise<uint32_t, std::string> rp;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Plans `pass` against the group's replicas now and makes its target the group's shape (scale and rebuilds build
// from it from now on).
void plan_pass(self_ptr self, GroupPass& pass) {
  auto& st = self->state;
  if (same_shape(*pass.from, *pass.to)) {  // replicas kept where they run; new ones in the slots left
    ResizePlan plan = plan_group_resize(st, pass.group(), *pass.to);
    pass.steps = std::move(plan.steps);
    size_t b = 0;
    for (const ReshapeStep& step : pass.steps)
      if (step.build) pass.plan_slot[*step.build] = plan.slot_of_build.at(b++);
  } else {
    std::vector<int> old;
    for (const auto& [index, r] : st.replicas)
      if ((r.params ? r.params->group_index : 0) == pass.group()) old.push_back(index);
    pass.steps = plan_reshape(old, false, pass.to->group().replicas, st.next_index);
    int built = 0;  // the new replicas are the plan's replicas in order
    for (const ReshapeStep& step : pass.steps)
      if (step.build) pass.plan_slot[*step.build] = built++;
  }
  pass.planned = true;
  pass.t0 = std::chrono::steady_clock::now();
  st.groups.at(pass.group()) = *pass.to;
}

// Replaces `pass`'s steps by those undoing the ones it did, and gives the group its old shape back.
void begin_rollback(self_ptr self, GroupPass& pass) {
  auto& st = self->state;
  const std::vector<ReshapeStep> undo = plan_rollback(std::span(pass.steps.data(), pass.done), st.next_index);
  pass.plan_slot.clear();
  for (size_t i = 0; i < undo.size(); ++i) {  // undo step i rebuilds what done step (done - 1 - i) retired
    const ReshapeStep& did = pass.steps[pass.done - 1 - i];
    if (undo[i].build && did.retire && pass.retired_slot.count(*did.retire))
      pass.plan_slot[*undo[i].build] = pass.retired_slot.at(*did.retire);
  }
  pass.steps = undo;
  pass.done = 0;
  pass.rolling_back = true;
  st.groups.at(pass.group()) = *pass.from;
}

void finish(self_ptr self, std::shared_ptr<Reshape> x) {
  auto& st = self->state;
  st.scaling = false;
  st.change.clear();
  arm_autoscale(self);  // the new topology may autoscale a group
  if (x->rolling_back) {
    spdlog::warn("coordinator: apply rolled back after {:.0f} ms: {}", ms_since(x->t0), x->failure);
    x->rp.deliver(static_cast<uint32_t>(Errc::worker_failed),
                  std::string("a step failed and was rolled back, the ") +
                      (x->several_groups ? "groups are" : "group is") + " as before: " + x->failure);
    return;
  }
  if (x->policies_after != x->policies_before)
    caf::anon_send(st.router, policy_atom::value, uint32_t(x->policies_after.prefill),
                   uint32_t(x->policies_after.decode));
  std::string done;
  for (const GroupPass& pass : x->passes) done += (done.empty() ? "" : "; ") + pass.summary;
  spdlog::info("coordinator: {}", done);
  x->rp.deliver(kCoordinatorOk, done);
}

// Carries out the current pass's next step, then the one after, pass after pass, and answers once none is left.
void run_reshape(self_ptr self, std::shared_ptr<Reshape> x) {
  auto& st = self->state;
  GroupPass& pass = x->passes[x->current];
  if (!pass.planned) plan_pass(self, pass);
  const std::string group = pass.to->group().name;
  if (pass.done == pass.steps.size()) {
    if (!x->rolling_back) {
      pass.summary = pass.steps.empty()
                         ? "group " + group + " unchanged"
                         : "group " + group + " reshaped in " + std::to_string(pass.steps.size()) + " steps: " +
                               (pass.first_serving_ms ? "the new shape served after " +
                                                            std::to_string(static_cast<int>(*pass.first_serving_ms)) +
                                                            " ms, "
                                                      : std::string()) +
                               "done after " + std::to_string(static_cast<int>(ms_since(pass.t0))) + " ms";
      if (++x->current == x->passes.size()) return finish(self, x);
      return run_reshape(self, x);
    }
    if (x->current == 0) return finish(self, x);
    begin_rollback(self, x->passes[--x->current]);  // a group reshaped before the failed one
    return run_reshape(self, x);
  }
  const ReshapeStep step = pass.steps[pass.done];
  st.change = std::string(x->rolling_back ? "rollback" : "apply") + " step " + std::to_string(pass.done + 1) + "/" +
              std::to_string(pass.steps.size()) + (x->several_groups ? " of group " + group : std::string()) + ": " +
              describe(step);
  spdlog::info("coordinator: {}", st.change);
  const size_t at = x->current;  // `pass` by its place: the lambdas below outlive this call
  auto advance = [=] {
    ++x->passes[at].done;
    run_reshape(self, x);
  };
  auto retire = [=] {
    if (!step.retire) return advance();
    if (auto it = self->state.replicas.find(*step.retire); it != self->state.replicas.end())
      x->passes[at].retired_slot[*step.retire] = it->second.plan_slot;
    drain_replicas(self, {*step.retire}, advance, /*migrate=*/true);
  };
  if (!step.build) return retire();
  const auto params = pass.rolling_back ? pass.from : pass.to;
  const int slot = pass.plan_slot.count(*step.build) ? pass.plan_slot.at(*step.build) : *step.build;
  build_replicas(self, {*step.build}, params, [=](std::optional<Error> failure) {
    auto& s = self->state;
    GroupPass& now = x->passes[at];
    if (!failure) {
      join_router(self, s.replicas.at(*step.build));
      if (!now.first_serving_ms && !now.rolling_back) now.first_serving_ms = ms_since(now.t0);
      return retire();
    }
    if (x->rolling_back) {  // the old shape does not start either: the groups stay as they are now
      s.scaling = false;
      s.change.clear();
      x->rp.deliver(static_cast<uint32_t>(failure->code), "a step failed (" + x->failure +
                                                              ") and so did its rollback, the group is left as "
                                                              "`actord status` shows: " + failure->message);
      return;
    }
    spdlog::warn("coordinator: apply step {} failed, rolling back: {}", describe(step), failure->message);
    x->failure = (x->several_groups ? "group " + now.to->group().name + ": " : std::string()) + describe(step) +
                 ": " + failure->message;
    x->rolling_back = true;
    begin_rollback(self, now);
    run_reshape(self, x);
  }, {slot});
}

}  // namespace

caf::result<uint32_t, std::string> reshape(self_ptr self, const wire_msg& msg) {
  auto& st = self->state;
  if (st.scaling) return {static_cast<uint32_t>(Errc::invalid_argument), "a resize of the group is in progress"};
  WireReader reader(msg);
  auto req = reader.root<wire::ReshapeRequest>();
  auto next = req.getAddLora() ? Result<TopologyConfig>(st.groups.at(0).topology)
                               : parse_topology(std::string(req.getTopologyYaml()), std::string(req.getSource()));
  if (!next) return {static_cast<uint32_t>(next.error().code), next.error().message};
  for (auto module : req.getLoraModules()) next->lora.modules.push_back({module.getName(), std::string(module.getPath())});
  if (next->groups.size() != st.groups.size() || req.getGroups().size() != st.groups.size())
    return {static_cast<uint32_t>(Errc::invalid_argument),
            "apply keeps the running groups: " + std::to_string(st.groups.size()) + " run, the topology has " +
                std::to_string(next->groups.size()) + " and the request sizes " +
                std::to_string(req.getGroups().size())};
  for (uint32_t gi = 0; gi < next->groups.size(); ++gi)  // an autoscaled group keeps its replicas (Engine::apply)
    if (const uint32_t replicas = req.getGroups()[gi].getReplicas(); replicas > 0)
      next->groups[gi].replicas = static_cast<int>(replicas);
  auto x = std::make_shared<Reshape>();
  x->several_groups = st.groups.size() > 1;
  x->policies_before = st.groups.at(0).route_policies;
  x->policies_after = phase_policies(*next);
  for (size_t gi = 0; gi < st.groups.size(); ++gi) {
    GroupPass& pass = x->passes.emplace_back();
    pass.from = std::make_shared<const CoordinatorParams>(st.groups[gi]);
    CoordinatorParams to = st.groups[gi];
    to.topology = *next;
    to.route_policies = x->policies_after;
    to.limits.max_num_seqs = next->engine.max_num_seqs;  // the engine limits apply may change
    to.limits.max_num_batched_tokens = next->engine.max_num_batched_tokens;
    to.limits.move_kv = next->engine.reshape_kv == "move";  // the new replicas' setting, for the next reshape
    to.limits.num_lora_adapters = static_cast<int>(next->lora.modules.size());  // adapters added at the end
    const auto sizing = req.getGroups()[static_cast<uint32_t>(gi)];
    to.rank_threads = to_vector<int>(sizing.getRankThreads());
    to.rank_agents.clear();
    for (auto agent : sizing.getRankAgents()) to.rank_agents.push_back(agent);
    to.set_kv_blocks(sizing.getNumKvBlocks(), sizing.getNumSwapBlocks());
    pass.to = std::make_shared<const CoordinatorParams>(std::move(to));
  }
  x->t0 = std::chrono::steady_clock::now();
  x->rp = self->make_response_promise<uint32_t, std::string>();
  st.scaling = true;
  run_reshape(self, x);
  return x->rp;
}

}  // namespace actord::coord
