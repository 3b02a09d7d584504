#include "actors/engine.hpp"

#include "executors/cuda/cuda_backend.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/exit_reason.hpp>
#include <spdlog/spdlog.h>
#include <random>

#include "actors/actor_system_setup.hpp"
#include "actors/api_actor.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/tokenizer_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "core/host_cpus.hpp"
#include "core/host_memory.hpp"
#include "core/topology_plan.hpp"
#include "core/kv_sizing.hpp"
#include "core/route_policy.hpp"
#include "memory/memory_budget.hpp"
#include "plugins/model_checks.hpp"
#include "plugins/model_registry.hpp"
#include "scheduler/topology_limits.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord {

namespace {
constexpr size_t kTokenizerActors = 2;
using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The SubmitRequest of `req` as request `id`; a seed is drawn when it samples at random without one.
wire_msg submit_message(const GenerateRequest& req, uint64_t id) {
  SamplingOptions sampling = req.sampling;
  if (sampling.seed == 0 && sampling.temperature > 0) {
    thread_local std::random_device entropy;
    sampling.seed = (uint64_t(entropy()) << 32) | entropy();
  }
  const size_t words = 64 + req.prompt_ids.size() / 2 + (req.prompt ? req.prompt->size() / 8 : 0);
  return build<wire::SubmitRequest>([&](wire::SubmitRequest::Builder out) {
    out.setCorrelationId(id);
    out.setRequestId(id);
    if (req.prompt) {
      out.setPromptText(text_of(*req.prompt));
      out.setTokenizePrompt(true);
    } else {
      fill_list(out.initPromptIds(static_cast<uint32_t>(req.prompt_ids.size())), req.prompt_ids);
    }
    out.setMaxTokens(req.max_tokens);
    to_wire(sampling, out.initSampling());
    out.setIgnoreEos(req.ignore_eos);
    out.setPriority(req.priority);
    out.setLora(req.lora);
    auto stops = out.initStopStrings(static_cast<uint32_t>(req.stop.size()));
    for (uint32_t s = 0; s < req.stop.size(); ++s) stops.set(s, text_of(req.stop[s]));
  }, static_cast<unsigned>(words));
}

// What group `gi` of the topology may describe but the engine cannot run yet (actord check plans it). The error
// names the key.
Status refuse_unbuilt_group(const TopologyConfig& topology, size_t gi) {
  const GroupSection& group = topology.groups[gi];
  const std::string path = "groups[" + std::to_string(gi) + "]";
  const std::string at = topology.source.string() + ": " + path;
  if (gi > 0 && group.device != topology.groups[0].device)
    return make_error(Errc::unsupported, at + ".device: the groups of one engine run on one kind of device so far (groups[0]: " +
                                             topology.groups[0].device + ", this one: " + group.device + ")");
  if (group.tbo && group.device == "cuda")
    return make_error(Errc::unsupported, at + ".tbo: two-batch overlap runs on CPU ranks only so far (device: cuda)");
  if (group.device == "cuda" && topology.engine.kv_cache_dtype == "int8")
    return make_error(Errc::unsupported, topology.source.string() + ": engine.kv_cache_dtype: int8 runs on CPU ranks "
                                                                    "only so far (" + path + ".device: cuda)");
  if (group.device == "cuda") {
    const std::string key = at + ".device: cuda: ";
    // A worker on another node looks for its own GPU; one on this machine needs one here, and the ranks of one
    // replica (an NCCL group) one each.
    if (group.placement != Placement::node) {
      const int gpus = cuda::device_count();
      if (gpus == 0) return make_error(Errc::unsupported, key + cuda::unavailable_reason());
      if (group.tp * group.pp > gpus) {
        return make_error(Errc::unsupported, key + "tp x pp = " + std::to_string(group.tp * group.pp) +
                                                 " ranks need a GPU each, this machine has " + std::to_string(gpus));
      }
    }
  }
  return {};
}

Status refuse_unbuilt(const TopologyConfig& topology) {
  for (size_t i = 0; i < topology.groups.size(); ++i) ACTORD_TRY_STATUS(refuse_unbuilt_group(topology, i));
  return {};
}

// What the engine resolves for group `gi` of `topology` on this machine: its replicas' KV blocks, the memory the
// local ranks of every group ask for, each of its ranks' threads and (placed on nodes) each rank's agent. A lone
// worker holds the whole model (`whole_weight_bytes`); ranks of a larger group, or of several groups, their shards,
// sized by the topology plan.
struct GroupSizing {
  KvSizing kv;
  MemoryAsk ask;
  MemoryAsk group_ask;  // of this group's ranks on this machine (ask: of every group's)
  std::vector<int> rank_threads;
  std::vector<std::string> rank_agents;
};

Result<GroupSizing> size_group(const TopologyConfig& topology, size_t gi, const ModelShape& shape,
                               const ModelConfig& model, DType kv_dtype, uint64_t whole_weight_bytes) {
  const std::string where = topology.source.string() + ": ";
  const GroupSection& group = topology.groups[gi];
  GroupSizing out;
  if (topology.groups.size() > 1 || group.replicas * group.ranks_per_replica() > 1 || group.placement == Placement::node) {
    auto plan = plan_topology(topology, shape, usable_cpu_cores());
    if (!plan) return plan.error();
    const GroupPlan& planned = plan->groups[gi];
    out.kv.num_blocks = planned.num_kv_blocks;
    out.kv.swap_blocks = planned.num_swap_blocks;
    out.ask = local_ask(*plan, group.device);
    MemoryAsk own{};
    for (const RankPlan& rank : planned.ranks) {
      if (rank.node != kLocalNode) continue;
      own.weights += rank.weight_bytes;
      own.kv += rank.kv_pool_bytes;
      own.swap += rank.swap_bytes;
    }
    out.group_ask = in_host_memory(own, group.device);
    for (int r = 0; r < group.ranks_per_replica(); ++r) {
      const RankPlan& rank = planned.ranks[static_cast<size_t>(r)];
      out.rank_threads.push_back(rank.threads > 0 ? rank.threads : group.threads);  // 0: resolved on its node
    }
    if (group.placement == Placement::node) out.rank_agents = rank_agents(topology, group);
    return out;
  }
  auto sized = size_kv_cache(topology.engine, model.kv_bytes_per_token(kv_dtype), where);
  if (!sized) return sized.error();
  out.kv = *sized;
  out.rank_threads = {group.threads};  // as the plan gives it for a larger group, so replicas compare equal
  out.ask = in_host_memory(MemoryAsk{whole_weight_bytes, uint64_t(out.kv.num_blocks) * out.kv.block_bytes,
                                     uint64_t(out.kv.swap_blocks) * out.kv.block_bytes},
                           group.device);
  out.group_ask = out.ask;
  return out;
}

// The autoscaled groups of `topology` at their max_replicas must fit this machine's cores and memory: the
// autoscaler grows them there without asking. The error names the first such group's autoscale.max_replicas.
Status check_autoscale_fits(const TopologyConfig& topology, const ModelShape& shape) {
  const auto ceiling = autoscale_ceiling(topology);
  if (!ceiling) return {};
  if (auto grown = plan_fitting(ceiling->topology, shape, usable_cpu_cores(), available_host_memory()); !grown)
    return ceiling->refusal(grown.error());
  return {};
}

// `topology` with each group's replicas counted in `fleet` (those not draining): the autoscaler resizes groups
// without the engine. A group with none there (not possible while it serves) keeps its count.
TopologyConfig with_replicas_of(TopologyConfig topology, const FleetInfo& fleet) {
  for (GroupSection& g : topology.groups) {
    const auto live = std::count_if(fleet.replicas.begin(), fleet.replicas.end(),
                                    [&](const ReplicaInfo& r) { return r.group == g.name && r.state != "draining"; });
    if (live > 0) g.replicas = static_cast<int>(live);
  }
  return topology;
}

}  // namespace

struct Engine::Impl {
  ModelRegistry registry = ModelRegistry::with_builtins();
  PolicyRegistry policies = PolicyRegistry::with_builtins();
  ModelConfig model;
  std::filesystem::path model_dir;
  int max_model_len = 0;
  std::shared_ptr<const Tokenizer> tokenizer;
  ActordSystemConfig caf_config{0};
  std::shared_ptr<TraceSink> trace;       // --trace; written once the actors have stopped
  std::unique_ptr<caf::actor_system> system;
  coordinator_actor coordinator;
  router_actor router;                    // where the tokenizer actors submit; it sums the replicas' stats
  TopologyConfig topology;                // as started, scaled and applied; each group's replicas as the
                                          // coordinator counted them at the last scale() or apply()
  // topology.lora.modules for the API's threads (apply changes the topology on the admin thread).
  mutable std::mutex lora_mutex;
  std::vector<LoraModule> lora_modules;
  ModelShape shape;
  DType kv_dtype = DType::f32;
  uint64_t whole_weight_bytes = 0;        // the model's weights as one worker holds them
  std::mutex scale_mutex;                 // one scale() or apply() at a time
  std::vector<tokenizer_actor> tokenizers;
  std::unique_ptr<ApiClient> api;
  std::atomic<uint64_t> next_id{1};

  ~Impl() {
    if (!system) return;
    api.reset();
    if (coordinator) caf::anon_send(coordinator, stop_atom::value);
    for (auto& t : tokenizers) caf::anon_send_exit(t, caf::exit_reason::user_shutdown);
    system.reset();  // waits for every actor to finish
    if (trace) {
      if (auto written = trace->write(); !written) spdlog::error("{}", written.error().message);
      else spdlog::info("trace: {} spans in {}", trace->num_spans(), trace->path().string());
    }
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

const ModelConfig& Engine::model_config() const { return impl_->model; }
int Engine::max_model_len() const { return impl_->max_model_len; }
const std::filesystem::path& Engine::model_dir() const { return impl_->model_dir; }
std::shared_ptr<const Tokenizer> Engine::tokenizer() const { return impl_->tokenizer; }
std::vector<LoraModule> Engine::lora_modules() const {
  std::lock_guard lock(impl_->lora_mutex);
  return impl_->lora_modules;
}
std::optional<uint32_t> Engine::lora_adapter(const std::string& name) const {
  std::lock_guard lock(impl_->lora_mutex);
  const auto& modules = impl_->lora_modules;
  for (size_t k = 0; k < modules.size(); ++k)
    if (modules[k].name == name) return static_cast<uint32_t>(k + 1);
  return std::nullopt;
}

Result<std::unique_ptr<Engine>> Engine::start(const TopologyConfig& topology, const EngineOptions& options) {
  ACTORD_TRY_STATUS(refuse_unbuilt(topology));
  ACTORD_TRY_STATUS(check_threads_fit(topology, usable_cpu_cores()));
  auto impl = std::make_unique<Impl>();
  auto checked = check_model(topology, impl->registry, impl->policies);
  if (!checked) return checked.error();
  const ModelConfig* model = &checked->config;
  impl->model = checked->config;
  impl->model_dir = topology.model.path;
  impl->max_model_len = checked->max_model_len;
  const std::string where = topology.source.string() + ": ";
  const DType kv_dtype = checked->kv_dtype;
  // A lone worker holds the whole model; each rank of a tp x pp replica its shard, and the topology plan sizes the
  // replica's KV pool (engine.kv_cache_memory per rank: what its largest rank fits) and its ranks' memory.
  impl->topology = topology;
  impl->lora_modules = topology.lora.modules;
  impl->shape = model_shape(*checked);
  impl->kv_dtype = kv_dtype;
  impl->whole_weight_bytes = checked->estimated_weight_bytes;
  std::vector<GroupSizing> sizings;
  for (size_t gi = 0; gi < topology.groups.size(); ++gi) {
    auto sizing = size_group(topology, gi, impl->shape, *model, kv_dtype, checked->estimated_weight_bytes);
    if (!sizing) return sizing.error();
    sizings.push_back(std::move(*sizing));
  }
  // Every byte the workers of every group will hold (each sizing's ask is all of them), against what the machine
  // has, before anything is allocated.
  if (const auto available = options.available_memory ? options.available_memory : available_host_memory())
    ACTORD_TRY_STATUS(check_memory_fits(sizings.front().ask, *available, where));
  ACTORD_TRY_STATUS(check_autoscale_fits(topology, impl->shape));
  auto tokenizer = Tokenizer::load(topology.model.path);
  if (!tokenizer) return tokenizer.error();
  impl->tokenizer = std::make_shared<const Tokenizer>(std::move(*tokenizer));

  CoordinatorParams params;
  params.topology = topology;
  params.limits = limits_of(topology, model->vocab_size, impl->max_model_len);
  params.num_layers = model->num_layers;
  params.num_experts = model->num_experts;
  params.kv_dtype = kv_dtype;
  params.route_policies = phase_policies(topology);
  if (!options.trace_path.empty()) {  // refused now rather than after the run
    std::ofstream probe(options.trace_path);
    if (!probe) return make_error(Errc::invalid_argument, "--trace: cannot write " + options.trace_path.string());
    impl->trace = std::make_shared<TraceSink>(options.trace_path);
    params.trace = impl->trace;
  }
  params.worker_executable = options.worker_executable;
  if (params.worker_executable.empty()) {
    std::error_code ec;
    params.worker_executable = std::filesystem::read_symlink("/proc/self/exe", ec);
  }
  params.log_level = options.log_level;
  params.worker_start_timeout = options.worker_start_timeout;
  params.registry = &impl->registry;
  params.policies = &impl->policies;
  // Each group: its replicas' KV pools and ranks' threads; a prefill group's schedulers hand prefilled sequences on.
  std::vector<CoordinatorParams> groups;
  for (size_t gi = 0; gi < topology.groups.size(); ++gi) {
    CoordinatorParams& g = groups.emplace_back(params);
    g.group_index = gi;
    // The scheduler starts with a quarter of the pool (at least one full-context sequence) and grows its lease in
    // bulk from there; the kv_pool keeps the rest (for other schedulers once groups share pools, and resizes).
    g.set_kv_blocks(sizings[gi].kv.num_blocks, sizings[gi].kv.swap_blocks);
    g.rank_threads = std::move(sizings[gi].rank_threads);
    g.rank_agents = std::move(sizings[gi].rank_agents);
    g.limits.hand_off_prefilled = topology.groups[gi].role == ReplicaRole::prefill;
    // A prefill replica's steps are long and compute-bound, and a sequence's KV can only be read out between two of
    // them: planned ahead, the next step would already be queued at the worker and the hand-off would wait for it.
    if (g.limits.hand_off_prefilled) g.limits.plan_ahead = false;
  }

  impl->system = std::make_unique<caf::actor_system>(impl->caf_config);
  for (size_t i = 0; i < kTokenizerActors; ++i) impl->tokenizers.push_back(spawn_tokenizer(*impl->system, impl->tokenizer));
  impl->coordinator = spawn_coordinator(*impl->system, std::move(groups));

  std::optional<Error> failure;
  {
    caf::scoped_actor self{*impl->system};
    self->request(impl->coordinator, caf::infinite, start_atom::value)
        .receive(
            [&](uint32_t code, std::string& error, router_actor& router) {
              if (code == kCoordinatorOk) impl->router = std::move(router);
              else failure = Error{static_cast<Errc>(code), std::move(error)};
            },
            [&](caf::error& err) { failure = Error{Errc::internal, impl->system->render(err)}; });
  }
  if (failure) return *failure;
  {
    caf::scoped_actor self{*impl->system};
    for (auto& tokenizer : impl->tokenizers) {
      self->request(tokenizer, caf::infinite, route_atom::value, impl->router)
          .receive([](bool) {}, [&](caf::error& err) { failure = Error{Errc::internal, impl->system->render(err)}; });
    }
  }
  if (failure) return *failure;
  impl->api = std::make_unique<ApiClient>(*impl->system, impl->tokenizers);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<std::vector<int32_t>> Engine::tokenize(const std::string& text, bool add_special_tokens) {
  caf::scoped_actor self{*impl_->system};
  const uint64_t id = impl_->next_id.fetch_add(1);
  wire_msg req = build<wire::TokenizeRequest>([&](wire::TokenizeRequest::Builder out) {
    out.setCorrelationId(id);
    out.setText(text_of(text));
    out.setAddSpecialTokens(add_special_tokens);
  });
  Result<std::vector<int32_t>> result = Error{Errc::internal, "no reply from the tokenizer"};
  self->request(impl_->tokenizers[id % impl_->tokenizers.size()], caf::infinite, tokenize_atom::value, std::move(req))
      .receive(
          [&](const wire_msg& reply) {
            WireReader reader(reply);
            auto r = reader.root<wire::TokenizeResult>();
            if (has_error(r.getError())) result = get_error(r.getError());
            else result = to_vector<int32_t>(r.getIds());
          },
          [&](caf::error& err) { result = Error{Errc::internal, impl_->system->render(err)}; });
  return result;
}

void GenerateOutput::add(const StreamEvent& e) {
  if (!e.prompt_ids.empty()) prompt_ids = e.prompt_ids;
  generated_ids.insert(generated_ids.end(), e.token_ids.begin(), e.token_ids.end());
  text += e.text;
  logprobs.insert(logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  prompt_logprobs.insert(prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
  if (e.error) error = e.error;
  if (!e.finish_reason.empty()) finish_reason = e.finish_reason;
}

Result<std::vector<GenerateOutput>> Engine::generate(const std::vector<GenerateRequest>& requests,
                                                     const TextCallback& on_text) {
  // What the callbacks fill in; shared with them, so that a late event after a timeout touches nothing freed.
  struct Run {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<GenerateOutput> outputs;  // request r's samples at first_output[r] ..
    std::vector<clock_type::time_point> submitted, first, last;
    size_t remaining = 0;
    uint64_t events = 0;
  };
  auto run = std::make_shared<Run>();
  std::vector<size_t> first_output;
  for (const auto& r : requests) {
    first_output.push_back(run->outputs.size());
    for (uint32_t s = 0; s < SamplingOptions::samples_of(r.sampling.n); ++s) {
      GenerateOutput& out = run->outputs.emplace_back();
      out.request_index = first_output.size() - 1;
      out.sample_index = s;
    }
  }
  const size_t num_outputs = run->outputs.size();
  run->submitted.resize(num_outputs);
  run->first.resize(num_outputs);
  run->last.resize(num_outputs);
  run->remaining = num_outputs;
  std::vector<uint64_t> ids;
  for (size_t r = 0; r < requests.size(); ++r) {
    const size_t base = first_output[r];
    {
      std::lock_guard lock(run->mutex);
      for (uint32_t s = 0; s < SamplingOptions::samples_of(requests[r].sampling.n); ++s) run->submitted[base + s] = clock_type::now();
    }
    ids.push_back(submit(requests[r], [run, base, on_text](const StreamEvent& e) {
      const auto now = clock_type::now();
      std::lock_guard lock(run->mutex);
      const size_t i = base + e.sample_index;
      GenerateOutput& out = run->outputs[i];
      if (!e.token_ids.empty()) {
        if (out.generated_ids.empty()) run->first[i] = now;
        run->last[i] = now;
      }
      out.add(e);
      if (!e.text.empty() && on_text) on_text(i, e.text);
      ++run->events;
      if (!e.finish_reason.empty()) {
        out.total_ms = ms_between(run->submitted[i], now);
        if (!out.generated_ids.empty()) {
          out.ttft_ms = ms_between(run->submitted[i], run->first[i]);
          const double decode_s = ms_between(run->first[i], run->last[i]) / 1000.0;
          if (out.generated_ids.size() > 1 && decode_s > 0)
            out.decode_tokens_per_s = double(out.generated_ids.size() - 1) / decode_s;
        }
        --run->remaining;
      }
      run->changed.notify_all();
    }));
  }
  std::unique_lock lock(run->mutex);
  while (run->remaining > 0) {
    const uint64_t seen = run->events;
    if (!run->changed.wait_for(lock, std::chrono::minutes(30), [&] { return run->events != seen; })) {
      lock.unlock();
      for (uint64_t id : ids) cancel(id);
      return Error{Errc::internal, "no progress from the scheduler for 30 minutes"};
    }
  }
  // A request's prompt logprobs come with its sample 0: every sample has the same prompt.
  std::vector<GenerateOutput> outputs = std::move(run->outputs);
  for (GenerateOutput& out : outputs) {
    if (out.sample_index > 0) out.prompt_logprobs = outputs[first_output[out.request_index]].prompt_logprobs;
  }
  return outputs;
}

}  // namespace actord

namespace actord {

uint64_t Engine::submit(const GenerateRequest& request, StreamCallback on_event) {
  const uint32_t n = SamplingOptions::samples_of(request.sampling.n);
  const uint64_t id = impl_->next_id.fetch_add(n);
  impl_->api->submit(id, n, submit_message(request, id), std::move(on_event));
  return id;
}

void Engine::cancel(uint64_t request_id) { impl_->api->cancel(request_id); }

size_t Engine::num_in_flight() const { return impl_->api->num_in_flight(); }

Result<EngineStats> Engine::stats() {
  caf::scoped_actor self{*impl_->system};
  Result<EngineStats> result = Error{Errc::internal, "no reply from the scheduler"};
  self->request(impl_->router, caf::infinite, stats_atom::value, stats_request(1))
      .receive(
          [&](const wire_msg& reply) {
            WireReader reader(reply);
            const EngineStats st = from_wire(reader.root<wire::SchedulerStats>());
            result = st;
          },
          [&](caf::error& err) { result = Error{Errc::internal, impl_->system->render(err)}; });
  return result;
}

Status Engine::scale(const std::string& group, int replicas) {
  std::lock_guard lock(impl_->scale_mutex);
  ACTORD_TRY_STATUS(count_replicas());
  const TopologyConfig& now = impl_->topology;
  const std::string where = now.source.string() + ": ";
  size_t gi = 0;
  while (gi < now.groups.size() && now.groups[gi].name != group) ++gi;
  if (gi == now.groups.size()) {
    std::string names;
    for (const GroupSection& g : now.groups) names += (names.empty() ? "" : ", ") + g.name;
    return make_error(Errc::invalid_argument, "unknown group \"" + group + "\" (the topology has: " + names + ")");
  }
  const std::string key = "groups[" + std::to_string(gi) + "]";
  if (replicas < 1) return make_error(Errc::invalid_argument, "replicas: must be at least 1, got " + std::to_string(replicas));
  if (replicas > kMaxGroupDimension)
    return make_error(Errc::invalid_argument,
                      "replicas: must be at most " + std::to_string(kMaxGroupDimension) + ", got " + std::to_string(replicas));
  const int have = now.groups[gi].replicas;
  if (const AutoscaleSection& a = now.groups[gi].autoscale;
      a.active() && (replicas < a.min_replicas || replicas > a.max_replicas))
    return make_error(Errc::invalid_argument,
                      "replicas: group " + group + " is autoscaled between " + std::to_string(a.min_replicas) +
                          " and " + std::to_string(a.max_replicas) + " replicas (" + key +
                          ".autoscale; actord apply changes it), got " + std::to_string(replicas));
  if (replicas > have) {
    // The added replicas must fit the machine: cores (plan_topology checks them as at start) and the memory
    // available now, for the ranks they put here (placed on nodes, some or none).
    TopologyConfig grown = now;
    grown.groups[gi].replicas = replicas;
    auto plan = plan_topology(grown, impl_->shape, usable_cpu_cores());
    if (!plan) return plan.error();
    const std::string& device = grown.groups[0].device;
    const MemoryAsk after = local_ask(*plan, device);
    MemoryAsk before{};
    if (auto running = plan_topology(now, impl_->shape, usable_cpu_cores())) before = local_ask(*running, device);
    auto minus = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
    const MemoryAsk added{minus(after.weights, before.weights), minus(after.kv, before.kv), minus(after.swap, before.swap)};
    if (const auto available = available_host_memory())
      ACTORD_TRY_STATUS(check_memory_fits(added, *available, where + "scale to " + std::to_string(replicas) + " replicas: "));
  }
  caf::scoped_actor self{*impl_->system};
  Status result = make_error(Errc::internal, "no reply from the coordinator");
  self->request(impl_->coordinator, caf::infinite, scale_atom::value, group, static_cast<int32_t>(replicas))
      .receive(
          [&](uint32_t code, std::string& message) {
            if (code == kCoordinatorOk) {
              result = {};
              impl_->topology.groups[gi].replicas = replicas;
            } else {
              result = make_error(static_cast<Errc>(code), std::move(message));
            }
          },
          [&](caf::error& err) { result = make_error(Errc::internal, impl_->system->render(err)); });
  return result;
}

namespace {

// The first difference between `now` and `next` that apply() cannot make live, as "key: why": anything outside
// the groups' shapes, sizes and routers. The server section is the HTTP server's, read once at start (and overridden
// by serve's flags): not compared.
std::string unappliable_change(const TopologyConfig& now, const TopologyConfig& next) {
  const std::string restart = ": changes need a restart (apply reshapes the groups only)";
  auto same_path = [](const std::filesystem::path& a, const std::filesystem::path& b) {
    std::error_code ea, eb;
    return std::filesystem::weakly_canonical(a, ea) == std::filesystem::weakly_canonical(b, eb);
  };
  const ModelSection &m0 = now.model, &m1 = next.model;
  if (!same_path(m0.path, m1.path) || m0.dtype != m1.dtype || m0.load_format != m1.load_format || m0.seed != m1.seed ||
      m0.quantization != m1.quantization || m0.quantization_group != m1.quantization_group ||
      m0.quantization_zero_points != m1.quantization_zero_points)
    return "model" + restart;
  const EngineSection &e0 = now.engine, &e1 = next.engine;
  // max_num_seqs and max_num_batched_tokens are the schedulers' limits: the new replicas take them.
  if (e0.block_size != e1.block_size || e0.kv_cache_memory != e1.kv_cache_memory || e0.max_model_len != e1.max_model_len ||
      e0.kv_cache_dtype != e1.kv_cache_dtype || e0.enable_prefix_caching != e1.enable_prefix_caching ||
      e0.preemption_mode != e1.preemption_mode || e0.swap_space != e1.swap_space || e0.step_timeout != e1.step_timeout ||
      e0.rebuild_retry_max != e1.rebuild_retry_max)
    return "engine" + restart + ", except max_num_seqs and max_num_batched_tokens";
  if (now.scheduler.policy != next.scheduler.policy || now.scheduler.plan_ahead != next.scheduler.plan_ahead)
    return "scheduler" + restart;
  if (now.speculative != next.speculative) return "speculative" + restart;
  // Adapters may be added at the end of lora.modules (new replicas load them, requests name them once the apply has
  // finished); those there keep their place, since running requests name adapters by their place.
  const std::vector<LoraModule> &l0 = now.lora.modules, &l1 = next.lora.modules;
  if (now.lora.max_lora_rank != next.lora.max_lora_rank || l1.size() < l0.size() ||
      !std::equal(l0.begin(), l0.end(), l1.begin(),
                  [&](const LoraModule& a, const LoraModule& b) { return a.name == b.name && same_path(a.path, b.path); }))
    return "lora" + restart + ", except adapters added at the end of lora.modules";
  if (now.plugins.size() != next.plugins.size() || !std::equal(now.plugins.begin(), now.plugins.end(), next.plugins.begin(), same_path))
    return "plugins" + restart;
  // Nodes join and leave (a group's placement puts replicas on a node added, parse_topology refuses one removed
  // that a group still names); a node that stays keeps its agent's address, since its ranks run there.
  for (const NodeSection& node : now.nodes)
    for (size_t i = 0; i < next.nodes.size(); ++i)
      if (next.nodes[i].name == node.name && next.nodes[i].address != node.address)
        return "nodes[" + std::to_string(i) + "].address: node " + node.name + "'s agent is at " + node.address +
               " (its ranks run there); to move it, remove the node and add one of another name";
  auto names = [](const TopologyConfig& t) {
    std::string out;
    for (const GroupSection& g : t.groups) out += (out.empty() ? "" : ", ") + g.name;
    return out;
  };
  if (now.groups.size() != next.groups.size())
    return "groups: apply reshapes the running groups (" + names(now) + "); adding or removing a group needs a restart";
  for (size_t i = 0; i < now.groups.size(); ++i) {
    const std::string key = "groups[" + std::to_string(i) + "]";
    if (now.groups[i].name != next.groups[i].name)
      return key + ".name: the running group is '" + now.groups[i].name + "' (apply reshapes it, it cannot rename it)";
    if (now.groups[i].role != next.groups[i].role)
      return key + ".role: changes need a restart (group " + now.groups[i].name + " runs as " +
             replica_role_name(now.groups[i].role) + ")";
  }
  return {};
}

}  // namespace

Result<std::string> Engine::apply(const std::string& yaml, const std::filesystem::path& source) {
  std::lock_guard lock(impl_->scale_mutex);
  auto next = parse_topology(yaml, source);
  if (!next) return next.error();
  ACTORD_TRY_STATUS(count_replicas());
  return reshape_to(*next, source, yaml);
}

Status Engine::count_replicas() {
  auto fleet = this->fleet();
  if (!fleet) return fleet.error();
  impl_->topology = with_replicas_of(std::move(impl_->topology), *fleet);
  return {};
}

Result<std::string> Engine::add_lora_adapter(const std::string& name, const std::filesystem::path& path) {
  std::lock_guard lock(impl_->scale_mutex);
  ACTORD_TRY_STATUS(count_replicas());
  if (!is_lora_name(name))
    return make_error(Errc::invalid_argument,
                      "lora_name: an adapter's name is letters, digits and _ . - / : (requests name it as their model)");
  if (name == impl_->model_dir.filename().string() || lora_adapter(name))
    return make_error(Errc::invalid_argument, "lora_name: '" + name + "' is served already");
  TopologyConfig next = impl_->topology;
  next.lora.modules.push_back({name, std::filesystem::absolute(path).lexically_normal()});
  return reshape_to(next, impl_->topology.source, {});
}

// apply() and add_lora_adapter(): the checks of `next` against the running topology and the machine, then the
// coordinator's rolling reshape to it (`yaml`: its text; empty: the running topology with next's added adapters).
Result<std::string> Engine::reshape_to(const TopologyConfig& file, const std::filesystem::path& source,
                                       const std::string& yaml) {
  const std::string where = source.string() + ": ";
  if (std::string change = unappliable_change(impl_->topology, file); !change.empty())
    return make_error(Errc::invalid_config, where + change);
  // A group autoscaled before and after keeps the replicas it has now, within the new bounds: the autoscaler, not
  // the file's count (its starting size), decides them.
  TopologyConfig next = file;
  for (size_t gi = 0; gi < next.groups.size(); ++gi) {
    GroupSection& g = next.groups[gi];
    if (g.autoscale.active() && impl_->topology.groups[gi].autoscale.active())
      g.replicas = std::clamp(impl_->topology.groups[gi].replicas, g.autoscale.min_replicas, g.autoscale.max_replicas);
  }
  ACTORD_TRY_STATUS(refuse_unbuilt(next));
  ACTORD_TRY_STATUS(check_threads_fit(next, usable_cpu_cores()));
  const size_t lora_before = impl_->topology.lora.modules.size();
  for (size_t k = lora_before; k < next.lora.modules.size(); ++k) {  // added adapters
    auto adapter = LoraAdapter::open(next.lora.modules[k], impl_->model, next.lora.max_lora_rank);
    if (!adapter) return make_error(adapter.error().code, where + adapter.error().message);
  }
  std::vector<GroupSizing> sizings;
  for (size_t gi = 0; gi < next.groups.size(); ++gi) {
    auto sizing = size_group(next, gi, impl_->shape, impl_->model, impl_->kv_dtype, impl_->whole_weight_bytes);
    if (!sizing) return sizing.error();
    sizings.push_back(std::move(*sizing));
  }
  // The coordinator reshapes one group after another and replaces one replica at a time, each new one started
  // beside the old ones: at most one new replica of a group, or all the added ones when it grows, must fit the
  // memory available now.
  if (const auto available = available_host_memory()) {
    MemoryAsk ask{};
    for (size_t gi = 0; gi < next.groups.size(); ++gi) {
      const uint64_t per = uint64_t(next.groups[gi].replicas);
      const uint64_t extra = uint64_t(std::max(1, next.groups[gi].replicas - impl_->topology.groups[gi].replicas));
      const MemoryAsk& all = sizings[gi].group_ask;
      const MemoryAsk group{all.weights / per * extra, all.kv / per * extra, all.swap / per * extra};
      if (group.weights + group.kv + group.swap > ask.weights + ask.kv + ask.swap) ask = group;
    }
    ACTORD_TRY_STATUS(check_memory_fits(ask, *available, where + "apply: "));
  }
  ACTORD_TRY_STATUS(check_autoscale_fits(next, impl_->shape));
  wire_msg request = build<wire::ReshapeRequest>([&](wire::ReshapeRequest::Builder out) {
    out.setTopologyYaml(yaml);
    out.setSource(source.string());
    auto groups = out.initGroups(static_cast<uint32_t>(sizings.size()));
    for (uint32_t gi = 0; gi < sizings.size(); ++gi) {
      const GroupSizing& sizing = sizings[gi];
      auto g = groups[gi];
      g.setReplicas(static_cast<uint32_t>(next.groups[gi].replicas));
      g.setNumKvBlocks(sizing.kv.num_blocks);
      g.setNumSwapBlocks(sizing.kv.swap_blocks);
      fill_list(g.initRankThreads(static_cast<uint32_t>(sizing.rank_threads.size())), sizing.rank_threads);
      auto agents = g.initRankAgents(static_cast<uint32_t>(sizing.rank_agents.size()));
      for (uint32_t i = 0; i < sizing.rank_agents.size(); ++i) agents.set(i, sizing.rank_agents[i]);
    }
    if (yaml.empty()) {
      out.setAddLora(true);
      auto added = out.initLoraModules(static_cast<uint32_t>(next.lora.modules.size() - lora_before));
      for (uint32_t k = 0; k < added.size(); ++k) {
        added[k].setName(next.lora.modules[lora_before + k].name);
        added[k].setPath(next.lora.modules[lora_before + k].path.string());
      }
    }
  });
  caf::scoped_actor self{*impl_->system};
  Result<std::string> result = Error{Errc::internal, "no reply from the coordinator"};
  self->request(impl_->coordinator, caf::infinite, reshape_atom::value, std::move(request))
      .receive(
          [&](uint32_t code, std::string& message) {
            if (code == kCoordinatorOk) {
              result = std::move(message);
              impl_->topology = next;
              std::lock_guard lora_lock(impl_->lora_mutex);
              impl_->lora_modules = next.lora.modules;
            } else {
              result = Error{static_cast<Errc>(code), std::move(message)};
            }
          },
          [&](caf::error& err) { result = Error{Errc::internal, impl_->system->render(err)}; });
  return result;
}

Result<FleetInfo> Engine::fleet() {
  caf::scoped_actor self{*impl_->system};
  Result<FleetInfo> result = Error{Errc::internal, "no reply from the coordinator"};
  self->request(impl_->coordinator, caf::infinite, fleet_atom::value)
      .receive(
          [&](const wire_msg& reply) {
            WireReader reader(reply);
            auto in = reader.root<wire::FleetStatus>();
            FleetInfo info;
            info.group = string_of(in.getGroup());
            info.replacements = in.getReplacements();
            info.scaling = in.getScaling();
            info.change = string_of(in.getChange());
            info.router_prefill = string_of(in.getRouterPrefill());
            info.router_decode = string_of(in.getRouterDecode());
            for (auto look : in.getAutoscale()) info.autoscale.push_back(string_of(look));
            for (auto r : in.getReplicas()) {
              ReplicaInfo& out = info.replicas.emplace_back();
              out.index = static_cast<int>(r.getIndex());
              out.state = string_of(r.getState());
              out.incarnation = r.getIncarnation();
              for (auto name : r.getRanks()) out.ranks.push_back(string_of(name));
              out.pids = to_vector<int32_t>(r.getPids());
              out.last_failure = string_of(r.getLastFailure());
              out.shape = string_of(r.getShape());
              for (auto node : r.getNodes()) out.nodes.push_back(string_of(node));
              out.group = string_of(r.getGroup());
              out.role = string_of(r.getRole());
            }
            result = std::move(info);
          },
          [&](caf::error& err) { result = Error{Errc::internal, impl_->system->render(err)}; });
  return result;
}

}  // namespace actord
