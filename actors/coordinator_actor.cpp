#include "actors/coordinator_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "actors/group_codec.hpp"
#include "actors/kv_pool_actor.hpp"
#include "actors/node_agent.hpp"
#include "actors/remote_worker_actor.hpp"
#include "actors/coordinator_state.hpp"
#include "actors/router_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/worker_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/collectives/group_factory.hpp"

namespace actord::coord {


// The replica's actors, stopped and no longer watched: scheduler, ranks (a worker process is killed), kv_pool.
void stop_replica_actors(self_ptr self, Replica& r) {
  auto stop = [&](auto& a) {
    if (!a) return;
    self->demonitor(a.address());
    self->send_exit(a, caf::exit_reason::user_shutdown);
    a = nullptr;
  };
  stop(r.scheduler);
  for (auto it = r.ranks.rbegin(); it != r.ranks.rend(); ++it) stop(*it);
  r.ranks.clear();
  for (auto& pool : r.kv_pools) stop(pool);
  r.kv_pools.clear();
  // Shared sets (a tp rank's stages) appear once per stage: give_back ignores CPUs no longer taken.
  for (const std::vector<int>& cpus : r.rank_cpus) self->state.cpus.give_back(cpus);
  r.rank_cpus.clear();
}

void stop_all(self_ptr self) {
  auto& st = self->state;
  for (auto& [index, r] : st.replicas) stop_replica_actors(self, r);
  st.replicas.clear();
  if (st.router) self->send_exit(st.router, caf::exit_reason::user_shutdown);
  st.router = nullptr;
}

// Whether replica `index` is still the incarnation a callback was made for.
Replica* current(self_ptr self, int index, uint32_t incarnation) {
  auto it = self->state.replicas.find(index);
  return it == self->state.replicas.end() || it->second.incarnation != incarnation ? nullptr : &it->second;
}

// The name of the node whose agent is at `agent` ("" for this machine).
std::string node_named(const TopologyConfig& topology, const std::string& agent) {
  if (agent.empty()) return {};
  for (const NodeSection& node : topology.nodes)
    if (node.address == agent) return node.name;
  return agent;
}

// The CPU threads rank `rank` of a replica of p's group computes with (its plan's, else the group's threads).
int threads_of_rank(const CoordinatorParams& p, int rank) {
  return size_t(rank) < p.rank_threads.size() ? p.rank_threads[size_t(rank)] : p.group().threads;
}

// A rank's CPU slot in its replica: the rank itself, or its first stage's rank (lane-major, then stage, then tp
// rank): a tp rank's stages take turns on one set of CPUs. FFN ranks (AFD) have their own.
int cpu_slot_of(const GroupSection& g, int rank) {
  if (rank >= g.tp * g.pp * g.lanes()) return rank;
  const int k = rank % g.tp, lane = rank / (g.tp * g.pp);
  return lane * g.tp * g.pp + k;
}

// The threads a replica of p's group computes with at once on this machine: each CPU slot's, of the ranks `here`.
int64_t replica_thread_demand(const CoordinatorParams& p, const std::function<bool(int)>& here) {
  int64_t demand = 0;
  for (int rank = 0; rank < p.group().ranks_per_replica(); ++rank)
    if (cpu_slot_of(p.group(), rank) == rank && here(rank)) demand += std::max(threads_of_rank(p, rank), 0);
  return demand;
}

// The threads all of g's replicas compute with at once on this machine: those of the ranks its plan puts here
// (g.rank_agents, replica-major: an empty agent, or none, is this machine).
int64_t local_thread_demand(const CoordinatorParams& g) {
  const size_t n_ranks = static_cast<size_t>(g.group().ranks_per_replica());
  int64_t demand = 0;
  for (size_t slot = 0; slot < static_cast<size_t>(g.group().replicas); ++slot)
    demand += replica_thread_demand(g, [&](int rank) {
      const size_t at = slot * n_ranks + static_cast<size_t>(rank);
      return at >= g.rank_agents.size() || g.rank_agents[at].empty();
    });
  return demand;
}

// engine.cpu_binding: the CPUs of each of replica r's worker processes on this machine (r.rank_cpus), taken from
// the coordinator's allocator: a tp rank's stages share a set (they take turns), each lane's tp rank and each FFN
// rank has its own, of as many CPUs as its threads. A rank with threads 0 (every core), or for which too few CPUs
// are free (replicas of a reshape started beside the old ones), stays unbound. `agent_at` (rank -> its node's
// agent, empty here) is empty for ranks that are threads of this process: nothing is bound then.
void bind_replica_cpus(self_ptr self, Replica& r, const std::function<std::string(int)>& agent_at) {
  auto& st = self->state;
  const CoordinatorParams& p = *r.params;
  const GroupSection& group = p.group();
  const int n_ranks = group.ranks_per_replica();
  r.rank_cpus.assign(static_cast<size_t>(n_ranks), {});
  const std::string& mode = p.topology.engine.cpu_binding;
  if (!agent_at || mode == "none") return;
  // Auto: only when the ranks of every group here ask for exactly the machine.
  int64_t demand = 0;
  for (const CoordinatorParams& g : st.groups) demand += local_thread_demand(g);
  if (mode == "auto" && demand != int64_t(st.cpus.size())) return;
  for (int rank = 0; rank < n_ranks; ++rank) {
    const int threads = threads_of_rank(p, rank);
    if (!agent_at(rank).empty() || threads < 1 || threads >= st.cpus.size()) continue;
    const int slot = cpu_slot_of(group, rank);
    r.rank_cpus[size_t(rank)] = slot == rank ? st.cpus.take(threads) : r.rank_cpus[size_t(slot)];
  }
}

// Spawns replica `index`'s kv_pool and ranks (with their collective groups), loads the model in every rank at
// once, and spawns its scheduler when all are ready; `done` gets nothing then, or the first error (the replica's
// actors are stopped). It does not join the router: the caller does (join_router).
void build_replica(self_ptr self, int index, BuildDone done) {
  auto& st = self->state;
  Replica& r = st.replicas.at(index);
  const std::shared_ptr<const CoordinatorParams> params = r.params;
  const CoordinatorParams& p = *params;
  const uint32_t incarnation = r.incarnation;
  const GroupSection& group = p.group();
  const std::string replica = "replica/" + std::to_string(index);
  const int tp = group.tp, pp = group.pp, lanes = group.lanes(), n_ranks = group.ranks_per_replica();
  // AFD: the FFN ranks follow the attention ranks (their index: attention + f).
  const int attention = tp * pp * lanes, ffn_workers = group.afd.ffn_workers;
  // Rank (k, s) of lane `lane`'s index in the replica: lane-major, then stage, then tp rank.
  auto rank_of = [=](int k, int s, int lane) { return (lane * pp + s) * tp + k; };
  // One rank alone keeps the name "worker/0"; ranks of a tp x pp replica are "worker/tpT.ppP", of a lane
  // "worker/dpL.tpT.ppP".
  auto ffn_name = [=](int f) { return replica + "/ffn/" + std::to_string(f); };
  auto rank_name = [=](int k, int s, int lane) {
    if (n_ranks == 1) return replica + "/worker/0";
    return replica + "/worker/" + (lanes > 1 ? "dp" + std::to_string(lane) + "." : std::string()) + "tp" +
           std::to_string(k) + ".pp" + std::to_string(s);
  };
  for (int lane = 0; lane < lanes; ++lane)  // each lane's ranks hold num_kv_blocks blocks of their own sequences
    r.kv_pools.push_back(spawn_kv_pool(self->system(), p.num_kv_blocks, static_cast<uint32_t>(p.limits.block_size)));

  // The replica's collective groups: one TP group per stage, one pipeline group per tp rank (of each lane), and with
  // attention lanes one EP group of all the replica's ranks (in rank order: EP rank = lane * tp + tp rank). Threads get their
  // communicators now; processes get the specs in WorkerInit and join them (shared memory on this node, ZeroMQ
  // tcp where a group has a rank on another node: rank 0 at a port free now, the others at ports of their own).
  const bool in_processes = group.placement != Placement::thread;
  // The node agent of rank (k, s) of lane `lane` of this replica; empty: this machine.
  auto agent_at = [&](int rank) {
    const size_t at = static_cast<size_t>(r.plan_slot) * static_cast<size_t>(n_ranks) + static_cast<size_t>(rank);
    return at < p.rank_agents.size() ? p.rank_agents[at] : std::string();
  };
  auto agent_of = [&](int k, int s, int lane) { return agent_at(rank_of(k, s, lane)); };
  std::optional<Error> group_failure;
  auto spec_of = [&](const std::string& name, const std::vector<std::string>& agents) {
    coll::GroupSpec spec;
    spec.name = replica + "/" + name;
    spec.id = st.next_group_id++;
    spec.size = static_cast<int>(agents.size());
    spec.placement = in_processes ? coll::Placement::process : coll::Placement::thread;
    spec.timeout = std::max<std::chrono::milliseconds>(std::chrono::seconds(10), 4 * p.topology.engine.step_timeout);
    spec.engine_pid = static_cast<int64_t>(getpid());
    spec.over_nccl = group.device == "cuda";  // its ranks' GPUs exchange device memory through NCCL
    spec.link_latency = group.link.latency;
    spec.link_bytes_per_second = group.link.bytes_per_second;
    if (std::all_of(agents.begin(), agents.end(), [](const std::string& a) { return a.empty(); })) return spec;
    spec.placement = coll::Placement::node;
    spec.backend = coll::Backend::zmq;
    // This machine's ranks bind on its address toward the group's other node.
    const auto remote = std::find_if(agents.begin(), agents.end(), [](const std::string& a) { return !a.empty(); });
    const Result<std::string> here = local_address_toward(host_of_address(*remote));
    for (size_t r = 0; r < agents.size(); ++r) {
      std::string host;
      Result<uint16_t> port = uint16_t{0};
      if (agents[r].empty()) {
        if (!here) {
          group_failure = here.error();
          return spec;
        }
        host = *here;
        if (r == 0) port = free_local_port(host);
      } else {
        host = host_of_address(agents[r]);
        if (r == 0) port = NodeAgentClient(agents[r], std::chrono::seconds(2)).free_port();
      }
      if (!port) {
        group_failure = port.error();
        return spec;
      }
      spec.endpoints.push_back("tcp://" + host + ":" + (r == 0 ? std::to_string(*port) : std::string("*")));
    }
    return spec;
  };
  std::vector<RankLinks> links(static_cast<size_t>(n_ranks));
  // Each micro-batch's groups (one micro-batch without two-batch overlap; micro-batch k's names end in /mbK):
  // tp [lane * pp + stage], pipeline [lane * tp + tp rank], and the EP group.
  struct Groups {
    std::vector<coll::GroupSpec> tp, pipeline, ep;
  };
  const int micro_batches = group.tbo ? group.micro_batches : 1;
  std::vector<Groups> groups(static_cast<size_t>(micro_batches));
  for (int m = 0; m < micro_batches; ++m) {
    Groups& g = groups[static_cast<size_t>(m)];
    const std::string suffix = m == 0 ? "" : "/mb" + std::to_string(m);
    for (int lane = 0; lane < lanes; ++lane) {
      const std::string prefix = lanes > 1 ? "dp" + std::to_string(lane) + "/" : "";
      if (tp > 1) {
        for (int s = 0; s < pp; ++s) {
          std::vector<std::string> agents;
          for (int k = 0; k < tp; ++k) agents.push_back(agent_of(k, s, lane));
          g.tp.push_back(spec_of(prefix + "pp" + std::to_string(s) + "/tp" + suffix, agents));
        }
      }
      if (pp > 1) {
        for (int k = 0; k < tp; ++k) {
          std::vector<std::string> agents;
          for (int s = 0; s < pp; ++s) agents.push_back(agent_of(k, s, lane));
          g.pipeline.push_back(spec_of(prefix + "tp" + std::to_string(k) + "/pipeline" + suffix, agents));
        }
      }
    }
    if (group.ep_group()) {  // pp is 1: rank order is EP order (AFD: the attention ranks, then the FFN ranks)
      std::vector<std::string> agents;
      for (int rank = 0; rank < n_ranks; ++rank) agents.push_back(agent_at(rank));
      g.ep.push_back(spec_of("ep" + suffix, agents));
    }
  }
  if (group_failure) {
    stop_replica_actors(self, r);
    return done(*group_failure);
  }
  if (!in_processes) {
    for (RankLinks& l : links) l.micro.resize(static_cast<size_t>(micro_batches - 1));
    // Rank `rank`'s slot for micro-batch m's group of kind `kind` (0 tp, 1 pipeline, 2 ep).
    auto slot = [&](int rank, int m, int kind) -> std::unique_ptr<coll::Communicator>& {
      RankLinks& l = links[static_cast<size_t>(rank)];
      if (m == 0) return kind == 0 ? l.tp : kind == 1 ? l.pipeline : l.ep;
      RankLinks::MicroBatch& mb = l.micro[static_cast<size_t>(m - 1)];
      return kind == 0 ? mb.tp : kind == 1 ? mb.pipeline : mb.ep;
    };
    // Each spec's ranks in its order, as indices into links.
    auto hand_out = [&](const coll::GroupSpec& spec, auto&& member, int m, int kind) -> std::optional<Error> {
      auto comms = coll::create_local_group(spec);
      if (!comms) return comms.error();
      for (int i = 0; i < spec.size; ++i) slot(member(i), m, kind) = std::move((*comms)[static_cast<size_t>(i)]);
      return std::nullopt;
    };
    std::optional<Error> failed;
    for (int m = 0; m < micro_batches && !failed; ++m) {
      const Groups& g = groups[static_cast<size_t>(m)];
      for (size_t i = 0; i < g.tp.size() && !failed; ++i)  // i = lane * pp + stage
        failed = hand_out(g.tp[i], [&](int k) { return rank_of(k, int(i) % pp, int(i) / pp); }, m, 0);
      for (size_t i = 0; i < g.pipeline.size() && !failed; ++i)  // i = lane * tp + tp rank
        failed = hand_out(g.pipeline[i], [&](int s) { return rank_of(int(i) % tp, s, int(i) / tp); }, m, 1);
      for (size_t i = 0; i < g.ep.size() && !failed; ++i) failed = hand_out(g.ep[i], [](int r) { return r; }, m, 2);
    }
    if (failed) {
      stop_replica_actors(self, r);
      return done(*failed);
    }
  }

  r.rank_names.clear();
  r.rank_nodes.clear();
  r.pids.assign(static_cast<size_t>(n_ranks), 0);
  bind_replica_cpus(self, r, in_processes ? agent_at : std::function<std::string(int)>{});
  for (int lane = 0; lane < lanes; ++lane) {
    for (int s = 0; s < pp; ++s) {
      for (int k = 0; k < tp; ++k) {
        const std::string name = rank_name(k, s, lane);
        const WorkerProcessOptions options{p.worker_executable, name, p.log_level, p.topology.engine.step_timeout,
                                           incarnation, agent_of(k, s, lane)};
        worker_actor worker =
            in_processes ? spawn_remote_worker(self->system(), options)
                         : spawn_worker(self->system(), *p.registry, std::move(links[static_cast<size_t>(rank_of(k, s, lane))]));
        self->monitor(worker);
        r.ranks.push_back(worker);
        r.rank_names.push_back(name);
        r.rank_nodes.push_back(node_named(p.topology, agent_of(k, s, lane)));
      }
    }
  }
  for (int f = 0; f < ffn_workers; ++f) {
    const WorkerProcessOptions options{p.worker_executable, ffn_name(f), p.log_level, p.topology.engine.step_timeout,
                                       incarnation, agent_at(attention + f)};
    worker_actor worker = in_processes ? spawn_remote_worker(self->system(), options)
                                       : spawn_worker(self->system(), *p.registry, std::move(links[size_t(attention + f)]));
    self->monitor(worker);
    r.ranks.push_back(worker);
    r.rank_names.push_back(ffn_name(f));
    r.rank_nodes.push_back(node_named(p.topology, agent_at(attention + f)));
  }

  // ffn: AFD's FFN rank `ffn` (k, s, lane unused), else -1.
  auto init_of = [&](int k, int s, int lane, int ffn = -1) {
    const size_t rank = static_cast<size_t>(ffn >= 0 ? attention + ffn : rank_of(k, s, lane));
    const int threads = rank < p.rank_threads.size() ? p.rank_threads[rank] : group.threads;
    return build<wire::WorkerInit>([&](wire::WorkerInit::Builder out) {
      out.setCorrelationId(1);
      out.setName(ffn >= 0 ? ffn_name(ffn) : rank_name(k, s, lane));
      out.setModelPath(p.topology.model.path.string());
      out.setDtype(p.topology.model.dtype);
      out.setNumKvBlocks(ffn >= 0 ? 0 : p.num_kv_blocks);  // an FFN rank holds no KV cache
      out.setNumSwapBlocks(p.limits.preemption_mode == PreemptionMode::swap && ffn < 0 ? p.limits.swap_blocks : 0);
      out.setKvDtype(dtype_name(p.kv_dtype));
      out.setBlockSize(static_cast<uint32_t>(p.limits.block_size));
      out.setMaxModelLen(static_cast<uint32_t>(std::max(p.limits.max_model_len, 0)));
      const std::vector<LoraModule>& adapters = p.topology.lora.modules;
      auto lora = out.initLoraModules(static_cast<uint32_t>(adapters.size()));
      for (uint32_t i = 0; i < adapters.size(); ++i) {
        lora[i].setName(adapters[i].name);
        lora[i].setPath(adapters[i].path.string());
      }
      out.setMaxLoraRank(static_cast<uint32_t>(p.topology.lora.max_lora_rank));
      out.setLogLevel(p.log_level);
      out.setLoadFormat(p.topology.model.load_format);
      out.setQuantization(p.topology.model.quantization);
      out.setQuantizationGroup(static_cast<uint32_t>(p.topology.model.quantization_group));
      out.setQuantizationZeroPoints(p.topology.model.quantization_zero_points);
      out.setThreads(static_cast<uint32_t>(threads));
      const std::vector<int>& cpus = r.rank_cpus.at(rank);
      auto cpu_list = out.initCpus(static_cast<uint32_t>(cpus.size()));
      for (uint32_t i = 0; i < cpus.size(); ++i) cpu_list.set(i, static_cast<uint32_t>(cpus[i]));
      out.setCpuIsa(group.cpu_isa);
      // GPU of a cuda rank: its index among the group's ranks (on its machine: the worker takes it modulo the GPUs
      // it sees).
      const size_t rank_index = static_cast<size_t>(index) * static_cast<size_t>(n_ranks) + rank;
      out.setDevice(group.device == "cuda" ? "cuda:" + std::to_string(rank_index) : "cpu");
      out.setSeed(p.topology.model.seed);
      auto plugins = out.initPlugins(static_cast<uint32_t>(p.topology.plugins.size()));
      for (uint32_t i = 0; i < p.topology.plugins.size(); ++i) plugins.set(i, p.topology.plugins[i].string());
      out.setTp(static_cast<uint32_t>(ffn >= 0 ? 1 : tp));
      out.setEp(static_cast<uint32_t>(group.ep));
      out.setNumRedundantExperts(static_cast<uint32_t>(group.num_redundant_experts));
      out.setPp(static_cast<uint32_t>(pp));
      out.setTpRank(static_cast<uint32_t>(k));
      out.setPpRank(static_cast<uint32_t>(s));
      out.setLane(static_cast<uint32_t>(lane));
      if (group.afd.active()) {
        out.setAfdAttention(static_cast<uint32_t>(attention));
        out.setAfdFfn(static_cast<uint32_t>(ffn_workers));
        out.setFfnRank(ffn);
      }
      out.setTbo(group.tbo);
      out.setMicroBatches(static_cast<uint32_t>(micro_batches));
      if (!in_processes) return;  // threads got their communicators above
      const bool ffn_rank = ffn >= 0;  // an FFN rank is in no TP or pipeline group
      auto fill = [&](const Groups& g, auto&& tp_out, auto&& pipeline_out, auto&& ep_out) {
        if (!g.ep.empty()) to_wire(g.ep.front(), ep_out());
        if (ffn_rank) return;
        if (tp > 1) to_wire(g.tp[static_cast<size_t>(lane * pp + s)], tp_out());
        if (pp > 1) to_wire(g.pipeline[static_cast<size_t>(lane * tp + k)], pipeline_out());
      };
      fill(groups[0], [&] { return out.initTpGroup(); }, [&] { return out.initPipelineGroup(); },
           [&] { return out.initEpGroup(); });
      if (micro_batches > 1) {
        auto extra = out.initMicroBatchGroups(static_cast<uint32_t>(micro_batches - 1));
        for (int m = 1; m < micro_batches; ++m) {
          auto e = extra[static_cast<uint32_t>(m - 1)];
          fill(groups[static_cast<size_t>(m)], [&] { return e.initTp(); }, [&] { return e.initPipeline(); },
               [&] { return e.initEp(); });
        }
      }
    });
  };
  // Every rank loads its shard at once (ranks in processes meet in their groups while loading); the scheduler
  // starts when all are ready, and the first failure stops them all.
  struct Progress {
    int waiting = 0;
    bool over = false;
  };
  auto progress = std::make_shared<Progress>();
  progress->waiting = n_ranks;
  auto fail = [=](Errc code, const std::string& why) {
    if (progress->over) return;
    progress->over = true;
    if (Replica* r = current(self, index, incarnation)) stop_replica_actors(self, *r);
    done(Error{code, why});
  };
  auto all_ready = [=]() {
    progress->over = true;
    Replica* r = current(self, index, incarnation);
    if (!r) return;  // stopped meanwhile
    auto& s = self->state;
    std::vector<SchedulerLane> scheduler_lanes(static_cast<size_t>(lanes));
    for (int lane = 0; lane < lanes; ++lane) {
      SchedulerLane& l = scheduler_lanes[static_cast<size_t>(lane)];
      auto policy = params->policies->create(params->topology.scheduler.policy);
      if (!policy) {
        stop_replica_actors(self, *r);
        return done(policy.error());
      }
      l.policy = std::move(*policy);
      l.kv_pool = r->kv_pools[static_cast<size_t>(lane)];
      for (int at = 0; at < tp * pp; ++at) {
        const worker_actor& worker = r->ranks[static_cast<size_t>(lane * tp * pp + at)];
        if (is_driver(at % tp, at / tp, pp)) l.worker = worker;
        else l.followers.push_back(worker);
      }
    }
    std::vector<worker_actor> ffn_pool(r->ranks.begin() + attention, r->ranks.end());
    EplbSettings eplb;
    eplb.step_interval = group.eplb_step_interval;
    eplb.ep = group.ep;
    eplb.num_experts = params->num_experts;
    eplb.redundant = group.num_redundant_experts;
    eplb.num_layers = params->num_layers;
    if (params->trace) params->trace->set_group(replica + "/scheduler", group.name);
    r->scheduler = spawn_scheduler(self->system(), params->limits, std::move(scheduler_lanes), std::move(ffn_pool),
                                   MicroBatching{group.tbo ? group.micro_batches : 0, group.tbo_auto}, s.router,
                                   caf::actor_cast<caf::actor>(self), replica + "/scheduler",
                                   params->topology.engine.step_timeout, eplb, params->trace);
    done(std::nullopt);
  };
  for (int rank_index = 0; rank_index < n_ranks; ++rank_index) {
    const int lane = rank_index / (tp * pp), s = rank_index / tp % pp, k = rank_index % tp;
    const int ffn = rank_index >= attention ? rank_index - attention : -1;
    const std::string name = ffn >= 0 ? ffn_name(ffn) : rank_name(k, s, lane);
    const size_t rank = static_cast<size_t>(rank_index);
    self->request(r.ranks[rank], p.worker_start_timeout, init_atom::value,
                  ffn >= 0 ? init_of(0, 0, 0, ffn) : init_of(k, s, lane))
        .then(
            [=](const wire_msg& reply) {
              WireReader reader(reply);
              auto ready = reader.root<wire::WorkerReady>();
              if (has_error(ready.getError())) {
                const Error err = get_error(ready.getError());
                return fail(err.code, err.message);
              }
              spdlog::info("coordinator: {} ready (pid {})", name, ready.getPid());
              if (Replica* r = current(self, index, incarnation)) r->pids[rank] = ready.getPid();
              if (--progress->waiting == 0 && !progress->over) all_ready();
            },
            [=](const caf::error& err) {
              fail(Errc::worker_failed, name + " did not become ready: " + self->system().render(err));
            });
  }
}

// Declared with its contract in coordinator_state.hpp, as are build_replicas and drain_replicas.
void join_router(self_ptr self, Replica& r, bool warm_in) {
  r.state = ReplicaState::serving;
  caf::anon_send(self->state.router, join_atom::value, static_cast<uint64_t>(r.index),
                 caf::actor_cast<caf::actor>(r.scheduler), warm_in, static_cast<uint32_t>(r.params->group().role));
}

void join_at_full_share(self_ptr self, const std::vector<int>& joining, const std::vector<int>& leaving) {
  std::set<size_t> groups;
  for (int index : joining) {
    Replica& r = self->state.replicas.at(index);
    join_router(self, r, /*warm_in=*/false);
    groups.insert(r.params->group_index);
  }
  auto among = [](const std::vector<int>& list, int index) { return std::find(list.begin(), list.end(), index) != list.end(); };
  for (const auto& [index, r] : self->state.replicas)
    if (r.params && groups.count(r.params->group_index) && r.state == ReplicaState::serving && r.scheduler &&
        !among(joining, index) && !among(leaving, index))
      caf::anon_send(r.scheduler, rebalance_atom::value);
}

// Tells the router to route nothing more to `scheduler` and runs `then` once it answered: from then on nothing new
// reaches the scheduler, so what it hands back after that is everything it was sent (router_actor.hpp).
void after_leaving_router(self_ptr self, const scheduler_actor& scheduler, std::function<void()> then) {
  if (!self->state.router) return then();
  self->request(self->state.router, caf::infinite, leave_atom::value, caf::actor_cast<caf::actor>(scheduler))
      .then([=](bool) { then(); }, [=](const caf::error&) { then(); });
}

void build_replicas(self_ptr self, const std::vector<int>& indices, std::shared_ptr<const CoordinatorParams> params,
                    std::function<void(std::optional<Error>)> done, std::vector<int> plan_slots) {
  struct Gather {
    size_t left = 0;
    std::optional<Error> failure;
  };
  auto gather = std::make_shared<Gather>();
  gather->left = indices.size();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int index = indices[i];
    Replica& r = self->state.replicas[index];
    r.index = index;
    r.plan_slot = i < plan_slots.size() ? plan_slots[i] : index;
    r.params = params;
    r.state = ReplicaState::starting;
    self->state.next_index = std::max(self->state.next_index, index + 1);
  }
  for (int index : indices) {
    build_replica(self, index, [=](std::optional<Error> failure) {
      if (failure && !gather->failure) gather->failure = failure;
      if (--gather->left > 0) return;
      if (gather->failure) {
        for (int i : indices) {
          auto it = self->state.replicas.find(i);
          if (it == self->state.replicas.end()) continue;
          stop_replica_actors(self, it->second);
          self->state.replicas.erase(it);
        }
      }
      done(gather->failure);
    });
  }
}

void drain_replicas(self_ptr self, const std::vector<int>& indices, std::function<void()> done, bool migrate) {
  std::vector<int> present;  // a replica may be gone already (a failed start)
  for (int index : indices)
    if (self->state.replicas.count(index)) present.push_back(index);
  if (present.empty()) return done();
  auto left = std::make_shared<size_t>(present.size());
  for (int index : present) {
    Replica& r = self->state.replicas.at(index);
    r.state = ReplicaState::draining;
    auto finish = [=]() {
      auto it = self->state.replicas.find(index);
      if (it != self->state.replicas.end()) {
        stop_replica_actors(self, it->second);
        self->state.replicas.erase(it);
      }
      spdlog::info("coordinator: replica/{} drained and stopped", index);
      if (--*left == 0) done();
    };
    if (!r.scheduler) {
      finish();
      continue;
    }
    const scheduler_actor scheduler = r.scheduler;
    after_leaving_router(self, scheduler, [=] {
      auto ask = [&](auto atom) {
        self->request(scheduler, caf::infinite, atom)
            .then([=](bool) { keep_last_stats(self, scheduler, finish); }, [=](const caf::error&) { finish(); });
      };
      if (migrate) ask(migrate_atom::value);
      else ask(drain_atom::value);
    });
  }
}

// How a replica is laid out, for status: "tp2 pp1", "afd 1:2", "tp1 pp1 ep2", with " tbo xM" and its placement.
std::string shape_of(const GroupSection& g) {
  std::string out = g.afd.active() ? "afd " + std::to_string(g.afd.attention_workers) + ":" +
                                         std::to_string(g.afd.ffn_workers) + (g.tp > 1 ? " tp" + std::to_string(g.tp) : "")
                                   : "tp" + std::to_string(g.tp) + " pp" + std::to_string(g.pp) +
                                         (g.ep > 1 ? " ep" + std::to_string(g.ep) : "");
  if (g.tbo) out += std::string(g.tbo_auto ? " tbo auto x" : " tbo x") + std::to_string(g.micro_batches);
  return out + (g.placement == Placement::thread ? ", threads" : g.placement == Placement::process ? ", processes" : ", nodes");
}

wire_msg fleet_status(self_ptr self) {
  const auto& st = self->state;
  return build<wire::FleetStatus>([&](wire::FleetStatus::Builder out) {
    out.setGroup(st.groups.at(0).group().name);
    out.setReplacements(st.replacements);
    out.setScaling(st.scaling);
    out.setChange(st.change);
    out.setRouterPrefill(route_policy_name(st.groups.at(0).route_policies.prefill));
    out.setRouterDecode(route_policy_name(st.groups.at(0).route_policies.decode));
    std::vector<std::string> looks;
    for (const std::string& look : st.autoscale_looks)
      if (!look.empty()) looks.push_back(look);
    auto autoscale = out.initAutoscale(static_cast<uint32_t>(looks.size()));
    for (uint32_t i = 0; i < looks.size(); ++i) autoscale.set(i, looks[i]);
    auto list = out.initReplicas(static_cast<uint32_t>(st.replicas.size()));
    uint32_t i = 0;
    for (const auto& [index, r] : st.replicas) {
      auto rs = list[i++];
      rs.setIndex(static_cast<uint32_t>(index));
      rs.setState(state_name(r.state));
      rs.setIncarnation(r.incarnation);
      auto names = rs.initRanks(static_cast<uint32_t>(r.rank_names.size()));
      for (uint32_t k = 0; k < r.rank_names.size(); ++k) names.set(k, r.rank_names[k]);
      fill_list(rs.initPids(static_cast<uint32_t>(r.pids.size())), r.pids);
      rs.setLastFailure(r.last_failure);
      if (r.params) {
        rs.setShape(shape_of(r.params->group()));
        rs.setGroup(r.params->group().name);
        rs.setRole(replica_role_name(r.params->group().role));
      }
      auto nodes = rs.initNodes(static_cast<uint32_t>(r.rank_nodes.size()));
      for (uint32_t k = 0; k < r.rank_nodes.size(); ++k) nodes.set(k, r.rank_nodes[k]);
    }
  });
}

coordinator_actor::behavior_type coordinator_impl(self_ptr self, std::vector<CoordinatorParams> groups) {
  self->state.groups = std::move(groups);
  self->set_down_handler([=](caf::down_msg& msg) {
    for (auto& [index, r] : self->state.replicas) {
      const bool ours =
          std::any_of(r.ranks.begin(), r.ranks.end(), [&](const worker_actor& a) { return a.address() == msg.source; });
      if (!ours) continue;
      const std::string why = "rank " + caf::to_string(msg.source) + " went down: " + self->system().render(msg.reason);
      recover(self, index, why);
      return;
    }
  });
  return {
      [=](start_atom) {
        auto rp = self->make_response_promise<uint32_t, std::string, router_actor>();
        auto& st = self->state;
        st.router = spawn_router(self->system(), st.groups.at(0).route_policies, st.groups.at(0).limits.block_size);
        // Every group's replicas at once, numbered group after group; each is its plan's replica slot in its group.
        struct Gather {
          size_t left = 0;
          std::optional<Error> failure;
        };
        auto gather = std::make_shared<Gather>();
        gather->left = st.groups.size();
        int next = 0;
        for (const CoordinatorParams& params : st.groups) {
          std::vector<int> indices, slots;
          for (int i = 0; i < params.group().replicas; ++i) {
            indices.push_back(next++);
            slots.push_back(i);
          }
          build_replicas(self, indices, std::make_shared<const CoordinatorParams>(params),
                         [=](std::optional<Error> failure) mutable {
            if (failure && !gather->failure) gather->failure = failure;
            if (--gather->left > 0) return;
            if (gather->failure) {
              stop_all(self);
              rp.deliver(static_cast<uint32_t>(gather->failure->code), gather->failure->message, router_actor{});
              return;
            }
            for (auto& [index, r] : self->state.replicas) join_router(self, r, /*warm_in=*/false);
            rp.deliver(kCoordinatorOk, std::string(), self->state.router);
            arm_autoscale(self);
          }, slots);
        }
        return rp;
      },
      [=](scale_atom, const std::string& group_name, int32_t replicas) -> caf::result<uint32_t, std::string> {
        auto& st = self->state;
        auto found = std::find_if(st.groups.begin(), st.groups.end(),
                                  [&](const CoordinatorParams& g) { return g.group().name == group_name; });
        if (found == st.groups.end())
          return {static_cast<uint32_t>(Errc::invalid_argument), "unknown group \"" + group_name + "\""};
        if (st.scaling)
          return {static_cast<uint32_t>(Errc::invalid_argument), "a scale of group " + group_name + " is in progress"};
        auto rp = self->make_response_promise<uint32_t, std::string>();
        scale_group(self, found->group_index, replicas, [=](uint32_t code, const std::string& message) mutable {
          rp.deliver(code, message);
        });
        return rp;
      },
      [=](reshape_atom, const wire_msg& msg) { return reshape(self, msg); },
      [=](fleet_atom) { return fleet_status(self); },
      // A scheduler lost its worker (a missed deadline, a failed step) before any rank went down.
      [=](lost_atom, const std::string& why) {
        const auto from = self->current_sender();
        for (auto& [index, r] : self->state.replicas) {
          if (r.scheduler && caf::actor_cast<caf::strong_actor_ptr>(r.scheduler) == from) return recover(self, index, why);
        }
      },
      [=](rebuild_atom, int index, uint32_t incarnation) { rebuild(self, index, incarnation); },
      [=](rebuild_atom, int index, uint32_t incarnation, const std::string& why) {
        probed(self, index, incarnation, why);
      },
      [=](autoscale_atom) { autoscale_tick(self); },
      [=](stop_atom) {
        stop_all(self);
        self->quit();
      },
  };
}

}  // namespace actord::coord

namespace actord {

void CoordinatorParams::set_kv_blocks(uint32_t kv_blocks, uint32_t swap_blocks) {
  num_kv_blocks = kv_blocks;
  const uint32_t full_context =
      static_cast<uint32_t>((limits.max_model_len + limits.block_size - 1) / std::max(limits.block_size, 1));
  limits.pool_blocks = kv_blocks;
  limits.lease_reserve = std::min(kv_blocks, std::max(full_context, kv_blocks / 4));
  limits.swap_blocks = swap_blocks;
}

coordinator_actor spawn_coordinator(caf::actor_system& system, std::vector<CoordinatorParams> groups) {
  return system.spawn(coord::coordinator_impl, std::move(groups));
}

}  // namespace actord
