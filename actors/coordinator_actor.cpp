#include "actors/coordinator_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/exit_reason.hpp>
#include <spdlog/spdlog.h>

#include "actors/kv_pool_actor.hpp"
#include "actors/remote_worker_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/worker_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"

namespace actord {
namespace {

struct coordinator_state {
  CoordinatorParams params;
  std::vector<caf::actor> spawned;  // everything this coordinator started, stopped in reverse order
  caf::actor scheduler;
  static inline const char* name = "coordinator";
};

using self_ptr = caf::stateful_actor<coordinator_state>*;

void stop_all(self_ptr self) {
  auto& spawned = self->state.spawned;
  for (auto it = spawned.rbegin(); it != spawned.rend(); ++it) {
    self->demonitor(*it);
    self->send_exit(*it, caf::exit_reason::user_shutdown);
  }
  spawned.clear();
  self->state.scheduler = nullptr;
}

caf::behavior coordinator_impl(self_ptr self, CoordinatorParams params) {
  self->state.params = std::move(params);
  self->set_down_handler([=](caf::down_msg& msg) {
    spdlog::error("coordinator: actor {} went down: {}", caf::to_string(msg.source), self->system().render(msg.reason));
  });
  return {
      [=](start_atom) {
        auto rp = self->make_response_promise();
        auto& st = self->state;
        const auto& p = st.params;
        const GroupSection& group = p.topology.groups.at(0);
        const std::string replica = "replica/0";
        const std::string worker_name = replica + "/worker/0";

        caf::actor kv_pool = spawn_kv_pool(self->system(), p.num_kv_blocks, static_cast<uint32_t>(p.limits.block_size));
        st.spawned.push_back(kv_pool);
        caf::actor worker;
        if (group.placement == Placement::process) {
          worker = spawn_remote_worker(self->system(),
                                       WorkerProcessOptions{p.worker_executable, worker_name, p.log_level,
                                                            p.topology.engine.step_timeout, p.ipc_dir});
        } else {
          worker = spawn_worker(self->system(), *p.registry);
        }
        st.spawned.push_back(worker);
        self->monitor(worker);

        wire_msg init = build<wire::WorkerInit>([&](wire::WorkerInit::Builder out) {
          out.setCorrelationId(1);
          out.setName(worker_name);
          out.setModelPath(p.topology.model.path.string());
          out.setDtype(p.topology.model.dtype);
          out.setNumKvBlocks(p.num_kv_blocks);
          out.setNumSwapBlocks(p.limits.preemption_mode == PreemptionMode::swap ? p.limits.swap_blocks : 0);
          out.setKvDtype(dtype_name(p.kv_dtype));
          out.setBlockSize(static_cast<uint32_t>(p.limits.block_size));
          out.setLogLevel(p.log_level);
          out.setLoadFormat(p.topology.model.load_format);
          out.setThreads(static_cast<uint32_t>(group.threads));
          out.setCpuIsa(group.cpu_isa);
          out.setSeed(p.topology.model.seed);
          auto plugins = out.initPlugins(static_cast<uint32_t>(p.topology.plugins.size()));
          for (uint32_t i = 0; i < p.topology.plugins.size(); ++i) plugins.set(i, p.topology.plugins[i].string());
        });
        auto fail = [=](Errc code, const std::string& why) mutable {
          stop_all(self);
          rp.deliver(static_cast<uint32_t>(code), why, caf::actor{});
        };
        self->request(worker, p.worker_start_timeout, init_atom::value, std::move(init))
            .then(
                [=](const wire_msg& reply) mutable {
                  WireReader reader(reply);
                  auto ready = reader.root<wire::WorkerReady>();
                  if (has_error(ready.getError())) {
                    const Error err = get_error(ready.getError());
                    fail(err.code, err.message);
                    return;
                  }
                  spdlog::info("coordinator: {} ready (pid {})", worker_name, ready.getPid());
                  auto& s = self->state;
                  auto policy = s.params.policies->create(s.params.topology.scheduler.policy);
                  if (!policy) {
                    fail(policy.error().code, policy.error().message);
                    return;
                  }
                  s.scheduler = spawn_scheduler(self->system(), s.params.limits, std::move(*policy), worker,
                                                kv_pool, replica + "/scheduler", s.params.topology.engine.step_timeout);
                  s.spawned.push_back(s.scheduler);
                  rp.deliver(kCoordinatorOk, std::string(), s.scheduler);
                },
                [=](const caf::error& err) mutable {
                  fail(Errc::worker_failed,
                       worker_name + " did not become ready: " + self->system().render(err));
                });
        return rp;
      },
      [=](stop_atom) {
        stop_all(self);
        self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& system, CoordinatorParams params) {
  return system.spawn(coordinator_impl, std::move(params));
}

}  // namespace actord
