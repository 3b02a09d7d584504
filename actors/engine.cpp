#include "actors/engine.hpp"

#include <unistd.h>

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/exit_reason.hpp>
#include <random>
#include <unordered_map>

#include "actors/actor_system_setup.hpp"
#include "actors/api_actor.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/tokenizer_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "memory/kv_sizing.hpp"
#include "plugins/model_checks.hpp"
#include "plugins/model_registry.hpp"
#include "plugins/plugin_loader.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord {

namespace {
constexpr size_t kTokenizerActors = 2;
using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// How many samples a request asks for (one when n is invalid: the scheduler refuses it with one error).
uint32_t samples_of(const GenerateRequest& r) {
  return r.sampling.n >= 1 && r.sampling.n <= SamplingOptions::kMaxSamples ? r.sampling.n : 1u;
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
    auto stops = out.initStopStrings(static_cast<uint32_t>(req.stop.size()));
    for (uint32_t s = 0; s < req.stop.size(); ++s) stops.set(s, text_of(req.stop[s]));
  }, static_cast<unsigned>(words));
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
  std::unique_ptr<caf::actor_system> system;
  caf::actor coordinator;
  caf::actor scheduler;
  std::vector<caf::actor> tokenizers;
  std::unique_ptr<ApiClient> api;
  std::atomic<uint64_t> next_id{1};

  ~Impl() {
    if (!system) return;
    api.reset();
    if (coordinator) caf::anon_send(coordinator, stop_atom::value);
    for (auto& t : tokenizers) caf::anon_send_exit(t, caf::exit_reason::user_shutdown);
    system.reset();  // waits for every actor to finish
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

const ModelConfig& Engine::model_config() const { return impl_->model; }
int Engine::max_model_len() const { return impl_->max_model_len; }
const std::filesystem::path& Engine::model_dir() const { return impl_->model_dir; }
std::shared_ptr<const Tokenizer> Engine::tokenizer() const { return impl_->tokenizer; }

Result<std::unique_ptr<Engine>> Engine::start(const TopologyConfig& topology, const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  for (const auto& plugin : topology.plugins) ACTORD_TRY_STATUS(load_plugin(plugin, impl->registry, &impl->policies));
  if (auto policy = impl->policies.check(topology.scheduler.policy); !policy)
    return make_error(policy.error().code, topology.source.string() + ": " + policy.error().message);
  auto model = ModelConfig::load(topology.model.path);
  if (!model) return model.error();
  impl->model = *model;
  impl->model_dir = topology.model.path;
  ACTORD_TRY_STATUS(check_supported(impl->registry, *model, topology.model.path));
  const std::string where = topology.source.string() + ": ";
  auto max_model_len = max_model_len_for(*model, topology.engine.max_model_len, where);
  if (!max_model_len) return max_model_len.error();
  impl->max_model_len = *max_model_len;
  const DType kv_dtype =
      ModelConfig::kv_cache_dtype(topology.engine.kv_cache_dtype, topology.model.dtype, model->torch_dtype);
  auto kv = size_kv_cache(topology.engine, model->kv_bytes_per_token(kv_dtype), where);
  if (!kv) return kv.error();
  auto tokenizer = Tokenizer::load(topology.model.path);
  if (!tokenizer) return tokenizer.error();
  impl->tokenizer = std::make_shared<const Tokenizer>(std::move(*tokenizer));

  CoordinatorParams params;
  params.topology = topology;
  params.limits = SchedulerLimits{topology.engine.max_num_seqs, topology.engine.max_num_batched_tokens,
                                  topology.engine.block_size,   impl->max_model_len,
                                  model->vocab_size,            topology.scheduler.plan_ahead};
  params.num_kv_blocks = kv->num_blocks;
  // The scheduler starts with a quarter of the pool (at least one full-context sequence) and grows its lease in
  // bulk from there; the kv_pool keeps the rest (for other schedulers once groups share pools, and resizes).
  const uint32_t full_context = static_cast<uint32_t>((impl->max_model_len + topology.engine.block_size - 1) /
                                                      topology.engine.block_size);
  params.limits.pool_blocks = params.num_kv_blocks;
  params.limits.enable_prefix_caching = topology.engine.enable_prefix_caching;
  params.limits.lease_reserve = std::min(params.num_kv_blocks, std::max(full_context, params.num_kv_blocks / 4));
  if (topology.engine.preemption_mode == "swap") params.limits.preemption_mode = PreemptionMode::swap;
  params.limits.swap_blocks = kv->swap_blocks;
  params.kv_dtype = kv_dtype;
  params.worker_executable = options.worker_executable;
  if (params.worker_executable.empty()) {
    std::error_code ec;
    params.worker_executable = std::filesystem::read_symlink("/proc/self/exe", ec);
  }
  params.log_level = options.log_level;
  params.worker_start_timeout = options.worker_start_timeout;
  params.registry = &impl->registry;
  params.policies = &impl->policies;

  impl->system = std::make_unique<caf::actor_system>(impl->caf_config);
  for (size_t i = 0; i < kTokenizerActors; ++i) impl->tokenizers.push_back(spawn_tokenizer(*impl->system, impl->tokenizer));
  impl->coordinator = spawn_coordinator(*impl->system, std::move(params));

  std::optional<Error> failure;
  {
    caf::scoped_actor self{*impl->system};
    self->request(impl->coordinator, caf::infinite, start_atom::value)
        .receive(
            [&](uint32_t code, std::string& error, caf::actor& scheduler) {
              if (code == kCoordinatorOk) impl->scheduler = std::move(scheduler);
              else failure = Error{static_cast<Errc>(code), std::move(error)};
            },
            [&](caf::error& err) { failure = Error{Errc::internal, impl->system->render(err)}; });
  }
  if (failure) return *failure;
  {
    caf::scoped_actor self{*impl->system};
    for (auto& tokenizer : impl->tokenizers) {
      self->request(tokenizer, caf::infinite, route_atom::value, impl->scheduler)
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

Result<std::vector<GenerateOutput>> Engine::generate(const std::vector<GenerateRequest>& requests,
                                                     const TextCallback& on_text) {
  // Request r's samples take outputs first_output[r] .. + samples_of(r) - 1.
  std::vector<size_t> first_output;
  size_t num_outputs = 0;
  for (const auto& r : requests) {
    first_output.push_back(num_outputs);
    num_outputs += samples_of(r);
  }
  std::vector<GenerateOutput> outputs(num_outputs);
  for (size_t r = 0; r < requests.size(); ++r) {
    for (uint32_t s = 0; s < samples_of(requests[r]); ++s) {
      outputs[first_output[r] + s].request_index = r;
      outputs[first_output[r] + s].sample_index = s;
    }
  }

  // Each request goes to a tokenizer actor, which encodes it, submits it and sends back its deltas with their text.
  caf::scoped_actor self{*impl_->system};
  std::unordered_map<uint64_t, size_t> index_of;  // request id (one per sample) -> output index
  std::vector<clock_type::time_point> submitted(num_outputs), first(num_outputs), last(num_outputs);
  for (size_t r = 0; r < requests.size(); ++r) {
    const size_t i = first_output[r];
    const uint32_t n = samples_of(requests[r]);
    const uint64_t id = impl_->next_id.fetch_add(n);  // sample s is id + s
    for (uint32_t s = 0; s < n; ++s) index_of[id + s] = i + s;
    for (uint32_t s = 0; s < n; ++s) submitted[i + s] = clock_type::now();
    self->send(impl_->tokenizers[id % impl_->tokenizers.size()], submit_atom::value, submit_message(requests[r], id));
  }

  size_t remaining = num_outputs;
  std::optional<Error> failure;
  // One sample's delta: its prompt (first delta), tokens, text and, at the end, how it finished and its timings.
  auto on_delta = [&](wire::StreamDelta::Reader delta, clock_type::time_point now) {
    auto it = index_of.find(delta.getRequestId());
    if (it == index_of.end()) return;
    const size_t i = it->second;
    GenerateOutput& out = outputs[i];
    if (delta.hasPromptIds()) out.prompt_ids = to_vector<int32_t>(delta.getPromptIds());
    const auto ids = delta.getTokenIds();
    if (ids.size() > 0) {
      if (out.generated_ids.empty()) first[i] = now;
      last[i] = now;
      for (int32_t id : ids) out.generated_ids.push_back(id);
    }
    for (auto lp : delta.getLogprobs()) out.logprobs.push_back(from_wire(lp));
    for (auto lp : delta.getPromptLogprobs()) out.prompt_logprobs.push_back(from_wire(lp));
    if (has_error(delta.getError())) out.error = get_error(delta.getError());
    const std::string_view text(delta.getText().cStr(), delta.getText().size());
    if (!text.empty() && on_text) on_text(i, text);
    out.text += text;
    switch (delta.getFinishReason()) {
      case wire::FinishReason::NONE: return;
      case wire::FinishReason::STOP: out.finish_reason = "stop"; break;
      case wire::FinishReason::LENGTH: out.finish_reason = "length"; break;
      case wire::FinishReason::CANCELLED: out.finish_reason = "cancelled"; break;
      default: out.finish_reason = "error"; break;
    }
    out.total_ms = ms_between(submitted[i], now);
    if (!out.generated_ids.empty()) {
      out.ttft_ms = ms_between(submitted[i], first[i]);
      const double decode_s = ms_between(first[i], last[i]) / 1000.0;
      if (out.generated_ids.size() > 1 && decode_s > 0)
        out.decode_tokens_per_s = double(out.generated_ids.size() - 1) / decode_s;
    }
    --remaining;
  };
  while (remaining > 0 && !failure) {
    self->receive(
        [&](delta_atom, const wire_msg& msg) {
          const auto now = clock_type::now();
          WireReader reader(msg);
          for (auto delta : reader.root<wire::StreamDeltaBatch>().getDeltas()) on_delta(delta, now);
        },
        caf::after(std::chrono::minutes(30)) >>
            [&] { failure = Error{Errc::internal, "no progress from the scheduler for 30 minutes"}; });
  }
  if (failure) return *failure;
  // A request's prompt logprobs come with its sample 0: every sample has the same prompt.
  for (GenerateOutput& out : outputs) {
    if (out.sample_index > 0) out.prompt_logprobs = outputs[first_output[out.request_index]].prompt_logprobs;
  }
  return outputs;
}

}  // namespace actord

namespace actord {

uint64_t Engine::submit(const GenerateRequest& request, StreamCallback on_event) {
  const uint32_t n = samples_of(request);
  const uint64_t id = impl_->next_id.fetch_add(n);
  impl_->api->submit(id, n, submit_message(request, id), std::move(on_event));
  return id;
}

void Engine::cancel(uint64_t request_id) { impl_->api->cancel(request_id); }

size_t Engine::num_in_flight() const { return impl_->api->num_in_flight(); }

Result<EngineStats> Engine::stats() {
  caf::scoped_actor self{*impl_->system};
  wire_msg req = build<wire::StatsRequest>([&](wire::StatsRequest::Builder out) { out.setCorrelationId(1); });
  Result<EngineStats> result = Error{Errc::internal, "no reply from the scheduler"};
  self->request(impl_->scheduler, caf::infinite, stats_atom::value, std::move(req))
      .receive(
          [&](const wire_msg& reply) {
            WireReader reader(reply);
            const EngineStats st = from_wire(reader.root<wire::SchedulerStats>());
            result = st;
          },
          [&](caf::error& err) { result = Error{Errc::internal, impl_->system->render(err)}; });
  return result;
}

}  // namespace actord
