#include "actors/coordinator_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/exit_reason.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "actors/group_codec.hpp"
#include "actors/kv_pool_actor.hpp"
#include "actors/remote_worker_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/worker_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/collectives/group_factory.hpp"

namespace actord {
namespace {

struct coordinator_state {
  CoordinatorParams params;
  std::vector<caf::actor> spawned;  // everything this coordinator started, stopped in reverse order
  caf::actor scheduler;
  uint64_t next_group_id = 1;       // collective groups' generations: each group made gets a new id
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
        const int tp = group.tp, pp = group.pp, n_ranks = tp * pp;
        // One rank alone keeps the name "worker/0"; ranks of a tp x pp replica are "worker/tpT.ppP".
        auto rank_name = [&](int k, int s) {
          return n_ranks == 1 ? replica + "/worker/0"
                              : replica + "/worker/tp" + std::to_string(k) + ".pp" + std::to_string(s);
        };

        caf::actor kv_pool = spawn_kv_pool(self->system(), p.num_kv_blocks, static_cast<uint32_t>(p.limits.block_size));
        st.spawned.push_back(kv_pool);

        // The replica's collective groups: one TP group per stage, one pipeline group per tp rank. Threads get their
        // communicators now; processes get the specs in WorkerInit and join them (shared memory on this node).
        const bool in_processes = group.placement == Placement::process;
        auto spec_of = [&](const std::string& name, int size) {
          coll::GroupSpec spec;
          spec.name = replica + "/" + name;
          spec.id = st.next_group_id++;
          spec.size = size;
          spec.placement = in_processes ? coll::Placement::process : coll::Placement::thread;
          spec.timeout = std::max<std::chrono::milliseconds>(std::chrono::seconds(10), 4 * p.topology.engine.step_timeout);
          spec.engine_pid = static_cast<int64_t>(getpid());
          return spec;
        };
        std::vector<RankLinks> links(static_cast<size_t>(n_ranks));
        std::vector<coll::GroupSpec> tp_specs, pipeline_specs;  // [stage], [tp rank]
        auto fail_now = [&](const Error& e) {
          stop_all(self);
          rp.deliver(static_cast<uint32_t>(e.code), e.message, caf::actor{});
          return rp;
        };
        if (tp > 1) {
          for (int s = 0; s < pp; ++s) tp_specs.push_back(spec_of("pp" + std::to_string(s) + "/tp", tp));
        }
        if (pp > 1) {
          for (int k = 0; k < tp; ++k) pipeline_specs.push_back(spec_of("tp" + std::to_string(k) + "/pipeline", pp));
        }
        if (!in_processes) {
          for (int s = 0; s < static_cast<int>(tp_specs.size()); ++s) {
            auto comms = coll::create_local_group(tp_specs[static_cast<size_t>(s)]);
            if (!comms) return fail_now(comms.error());
            for (int k = 0; k < tp; ++k) links[static_cast<size_t>(s * tp + k)].tp = std::move((*comms)[static_cast<size_t>(k)]);
          }
          for (int k = 0; k < static_cast<int>(pipeline_specs.size()); ++k) {
            auto comms = coll::create_local_group(pipeline_specs[static_cast<size_t>(k)]);
            if (!comms) return fail_now(comms.error());
            for (int s = 0; s < pp; ++s)
              links[static_cast<size_t>(s * tp + k)].pipeline = std::move((*comms)[static_cast<size_t>(s)]);
          }
        }

        std::vector<caf::actor> workers;
        for (int s = 0; s < pp; ++s) {
          for (int k = 0; k < tp; ++k) {
            const std::string name = rank_name(k, s);
            caf::actor worker =
                in_processes ? spawn_remote_worker(self->system(),
                                                   WorkerProcessOptions{p.worker_executable, name, p.log_level,
                                                                        p.topology.engine.step_timeout, p.ipc_dir})
                             : spawn_worker(self->system(), *p.registry, std::move(links[static_cast<size_t>(s * tp + k)]));
            st.spawned.push_back(worker);
            self->monitor(worker);
            workers.push_back(worker);
          }
        }

        auto init_of = [&](int k, int s) {
          return build<wire::WorkerInit>([&](wire::WorkerInit::Builder out) {
            out.setCorrelationId(1);
            out.setName(rank_name(k, s));
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
            out.setTp(static_cast<uint32_t>(tp));
            out.setPp(static_cast<uint32_t>(pp));
            out.setTpRank(static_cast<uint32_t>(k));
            out.setPpRank(static_cast<uint32_t>(s));
            if (in_processes && tp > 1) to_wire(tp_specs[static_cast<size_t>(s)], out.initTpGroup());
            if (in_processes && pp > 1) to_wire(pipeline_specs[static_cast<size_t>(k)], out.initPipelineGroup());
          });
        };
        // Every rank loads its shard at once (ranks in processes meet in their groups while loading); the scheduler
        // starts when all are ready, and the first failure stops them all.
        struct Progress {
          int waiting = 0;
          bool failed = false;
        };
        auto progress = std::make_shared<Progress>();
        progress->waiting = n_ranks;
        auto fail = [=](Errc code, const std::string& why) mutable {
          if (progress->failed) return;
          progress->failed = true;
          stop_all(self);
          rp.deliver(static_cast<uint32_t>(code), why, caf::actor{});
        };
        auto all_ready = [=]() mutable {
          auto& s = self->state;
          auto policy = s.params.policies->create(s.params.topology.scheduler.policy);
          if (!policy) {
            fail(policy.error().code, policy.error().message);
            return;
          }
          caf::actor driver;
          std::vector<caf::actor> followers;
          for (int r = 0; r < n_ranks; ++r) {
            const caf::actor& worker = workers[static_cast<size_t>(r)];
            if (is_driver(r % tp, r / tp, pp)) driver = worker;
            else followers.push_back(worker);
          }
          s.scheduler = spawn_scheduler(self->system(), s.params.limits, std::move(*policy), driver, kv_pool,
                                        replica + "/scheduler", s.params.topology.engine.step_timeout,
                                        std::move(followers));
          s.spawned.push_back(s.scheduler);
          rp.deliver(kCoordinatorOk, std::string(), s.scheduler);
        };
        for (int s = 0; s < pp; ++s) {
          for (int k = 0; k < tp; ++k) {
            const std::string name = rank_name(k, s);
            self->request(workers[static_cast<size_t>(s * tp + k)], p.worker_start_timeout, init_atom::value, init_of(k, s))
                .then(
                    [=](const wire_msg& reply) mutable {
                      WireReader reader(reply);
                      auto ready = reader.root<wire::WorkerReady>();
                      if (has_error(ready.getError())) {
                        const Error err = get_error(ready.getError());
                        fail(err.code, err.message);
                        return;
                      }
                      spdlog::info("coordinator: {} ready (pid {})", name, ready.getPid());
                      if (--progress->waiting == 0 && !progress->failed) all_ready();
                    },
                    [=](const caf::error& err) mutable {
                      fail(Errc::worker_failed, name + " did not become ready: " + self->system().render(err));
                    });
          }
        }
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
