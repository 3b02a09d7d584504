// actord apply's rolling reshape (coordinator_actor.hpp, reshape_atom): the plan of reshape_plan.hpp carried out
// one step at a time, rolled back when a step fails.
#include <spdlog/spdlog.h>

#include <chrono>
#include <span>

#include "actors/coordinator_state.hpp"
#include "actors/reshape_plan.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

namespace actord::coord {
namespace {

// Whether replicas built from `b` would be built exactly as those from `a` (only the replicas count differs; the
// same LoRA adapters): a reshape then adds or retires replicas and leaves the others alone.
bool same_shape(const CoordinatorParams& a, const CoordinatorParams& b) {
  GroupSection ga = a.group(), gb = b.group();
  ga.replicas = gb.replicas = 0;
  return ga == gb && a.topology.lora == b.topology.lora && a.limits.max_num_seqs == b.limits.max_num_seqs &&
         a.limits.max_num_batched_tokens == b.limits.max_num_batched_tokens && a.num_kv_blocks == b.num_kv_blocks &&
         a.limits.swap_blocks == b.limits.swap_blocks && a.rank_threads == b.rank_threads;
}

// An apply being carried out: its steps one at a time (reshape_plan.hpp); after a failed step, the steps undoing
// those done.
struct Reshape {
  std::vector<ReshapeStep> steps;
  size_t done = 0;
  std::shared_ptr<const CoordinatorParams> from, to;  // the group's shape before and after
  bool rolling_back = false;
  std::string failure;  // the failed step's error, while rolling back
  std::chrono::steady_clock::time_point t0;
  std::optional<double> first_serving_ms;  // when the first replica of the new shape took requests
  std::map<int, int> plan_slot;            // of each replica a step builds (index -> its plan's replica)
  std::map<int, int> retired_slot;         // of each replica retired (a rollback builds its like there again)
  caf::typed_response_promise<uint32_t, std::string> rp;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Carries out `x`'s next step, then the one after, and answers once none is left.
void run_reshape(self_ptr self, std::shared_ptr<Reshape> x) {
  auto& st = self->state;
  const std::string& group = st.groups.at(0).group().name;
  if (x->done == x->steps.size()) {
    st.scaling = false;
    st.change.clear();
    const double total = ms_since(x->t0);
    if (x->rolling_back) {
      spdlog::warn("coordinator: apply rolled back after {:.0f} ms: {}", total, x->failure);
      x->rp.deliver(static_cast<uint32_t>(Errc::worker_failed),
                    "a step failed and was rolled back, the group is as before: " + x->failure);
      return;
    }
    const std::string done = "group " + group + " reshaped in " + std::to_string(x->steps.size()) + " steps: " +
                             (x->first_serving_ms ? "the new shape served after " +
                                                        std::to_string(static_cast<int>(*x->first_serving_ms)) + " ms, "
                                                  : std::string()) +
                             "done after " + std::to_string(static_cast<int>(total)) + " ms";
    spdlog::info("coordinator: {}", done);
    x->rp.deliver(kCoordinatorOk, done);
    return;
  }
  const ReshapeStep step = x->steps[x->done];
  st.change = std::string(x->rolling_back ? "rollback" : "apply") + " step " + std::to_string(x->done + 1) + "/" +
              std::to_string(x->steps.size()) + ": " + describe(step);
  spdlog::info("coordinator: {}", st.change);
  auto advance = [=] {
    ++x->done;
    run_reshape(self, x);
  };
  auto retire = [=] {
    if (!step.retire) return advance();
    if (auto it = self->state.replicas.find(*step.retire); it != self->state.replicas.end())
      x->retired_slot[*step.retire] = it->second.plan_slot;
    drain_replicas(self, {*step.retire}, advance, /*migrate=*/true);
  };
  if (!step.build) return retire();
  const auto params = x->rolling_back ? x->from : x->to;
  const int slot = x->plan_slot.count(*step.build) ? x->plan_slot.at(*step.build) : *step.build;
  build_replicas(self, {*step.build}, params, [=](std::optional<Error> failure) {
    auto& s = self->state;
    if (!failure) {
      join_router(self, s.replicas.at(*step.build));
      if (!x->first_serving_ms && !x->rolling_back) x->first_serving_ms = ms_since(x->t0);
      return retire();
    }
    if (x->rolling_back) {  // the old shape does not start either: the group stays as it is now
      s.scaling = false;
      s.change.clear();
      x->rp.deliver(static_cast<uint32_t>(failure->code), "a step failed (" + x->failure +
                                                              ") and so did its rollback, the group is left as "
                                                              "`actord status` shows: " + failure->message);
      return;
    }
    spdlog::warn("coordinator: apply step {} failed, rolling back: {}", describe(step), failure->message);
    x->failure = describe(step) + ": " + failure->message;
    const std::vector<ReshapeStep> undo = plan_rollback(std::span(x->steps.data(), x->done), s.next_index);
    x->plan_slot.clear();
    for (size_t i = 0; i < undo.size(); ++i) {  // undo step i rebuilds what done step (done - 1 - i) retired
      const ReshapeStep& did = x->steps[x->done - 1 - i];
      if (undo[i].build && did.retire && x->retired_slot.count(*did.retire))
        x->plan_slot[*undo[i].build] = x->retired_slot.at(*did.retire);
    }
    x->steps = undo;
    x->done = 0;
    x->rolling_back = true;
    s.groups.at(0) = *x->from;
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
  auto x = std::make_shared<Reshape>();
  x->from = std::make_shared<const CoordinatorParams>(st.groups.at(0));
  CoordinatorParams to = st.groups.at(0);
  to.topology = *next;
  to.limits.max_num_seqs = next->engine.max_num_seqs;  // the engine limits apply may change
  to.limits.max_num_batched_tokens = next->engine.max_num_batched_tokens;
  to.limits.move_kv = next->engine.reshape_kv == "move";  // the new replicas' setting, for the next reshape
  to.limits.num_lora_adapters = static_cast<int>(next->lora.modules.size());  // adapters added at the end
  to.rank_threads = to_vector<int>(req.getRankThreads());
  to.rank_agents.clear();
  for (auto agent : req.getRankAgents()) to.rank_agents.push_back(agent);
  to.set_kv_blocks(req.getNumKvBlocks(), req.getNumSwapBlocks());
  x->to = std::make_shared<const CoordinatorParams>(std::move(to));
  std::vector<int> old;
  for (const auto& [index, r] : st.replicas) old.push_back(index);
  const bool same = same_shape(*x->from, *x->to);
  x->steps = plan_reshape(old, same, next->groups[0].replicas, st.next_index);
  int built = same ? static_cast<int>(old.size()) : 0;  // the new replicas are the plan's replicas in order
  for (const ReshapeStep& step : x->steps)
    if (step.build) x->plan_slot[*step.build] = built++;
  x->t0 = std::chrono::steady_clock::now();
  x->rp = self->make_response_promise<uint32_t, std::string>();
  st.scaling = true;
  st.groups.at(0) = *x->to;
  run_reshape(self, x);
  return x->rp;
}

}  // namespace actord::coord
