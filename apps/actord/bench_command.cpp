// actord bench offline: random prompts through the whole engine (actors, scheduler, worker), no server.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <tuple>

#include "actors/engine.hpp"
#include "apps/actord/commands.hpp"
#include "core/expert_load.hpp"
#include "executors/cpu/gemm.hpp"

namespace actord::cli {
namespace {

nlohmann::json percentiles(const std::vector<double>& v) {
  return {{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}};
}

double peak_rss_mb() {
  rusage self{}, children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);  // worker processes, once reaped
  return static_cast<double>(std::max(self.ru_maxrss, children.ru_maxrss)) / 1024.0;
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchArgs& args) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* cmd = bench->add_subcommand("offline", "Throughput and latency of random prompts through the whole engine");
  cmd->add_option("--config", args.config, "Topology file to start from (default: one CPU worker in this process)");
  cmd->add_option("--model", args.model, "Model folder (HF layout)")->required();
  cmd->add_option("--num-prompts", args.num_prompts, "Prompts in total")->capture_default_str();
  cmd->add_option("--input-len", args.input_len, "Tokens per prompt")->capture_default_str();
  cmd->add_option("--output-len", args.output_len, "Tokens generated per prompt")->capture_default_str();
  cmd->add_option("--shared-prefix-len", args.shared_prefix_len,
                  "Tokens every prompt starts with (the same ones: a system prompt), before its --input-len own")
      ->capture_default_str();
  cmd->add_option("--concurrency", args.concurrency, "Sequences running at once (engine.max_num_seqs)")
      ->capture_default_str();
  cmd->add_option("--threads", args.threads, "CPU threads of the worker (0: one per core)")->capture_default_str();
  cmd->add_option("--load-format", args.load_format, "auto (safetensors) or dummy (random weights)")
      ->capture_default_str();
  cmd->add_option("--dtype", args.dtype, "auto, float32, bfloat16 or float16")->capture_default_str();
  cmd->add_option("--seed", args.seed, "Seed of the random prompts")->capture_default_str();
  cmd->add_option("--temperature", args.temperature, "Sampling temperature (0: greedy; else request i draws with seed i)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--top-p", args.top_p, "Nucleus sampling mass, in (0, 1]")
      ->check(CLI::Range(1e-6f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--top-k", args.top_k, "Draw among the k most likely tokens (0: all)")->capture_default_str();
  add_response_format_options(cmd, args.response_format);
  cmd->add_option("--set", args.set, "Override a topology key, as for generate (repeatable)")->take_last();
  cmd->add_option("--lora", args.lora,
                  "Requests on LoRA adapters: NAME of lora.modules or NAME=PATH, or several comma-separated (request "
                  "i takes the (i mod count)-th: mixed adapters in every batch)");
  cmd->add_option("--log-level", args.log_level, "Log level")->capture_default_str();
  cmd->add_option("--trace", args.trace,
                  "Write a Chrome trace (JSON, for Perfetto) of every step of every rank to this file at the end");
  cmd->add_flag("--json", args.json, "Print one JSON object instead of a table");
  args.offline = cmd;
  return bench;
}

int run_bench(const BenchArgs& args) {
  if (!apply_log_level(args.log_level)) return 2;
  for (auto [flag, value, least] : {std::tuple{"--num-prompts", args.num_prompts, 1}, {"--input-len", args.input_len, 1},
                                    {"--output-len", args.output_len, 1}, {"--concurrency", args.concurrency, 1},
                                    {"--shared-prefix-len", args.shared_prefix_len, 0}, {"--threads", args.threads, 0},
                                    {"--top-k", args.top_k, 0}}) {
    if (value < least) {
      return fail({Errc::invalid_argument, std::string(flag) + ": must be at least " + std::to_string(least) +
                                               ", got " + std::to_string(value)});
    }
  }
  auto model = ModelConfig::load(args.model);
  if (!model) return fail(model.error());

  // The topology: the given file, or a single CPU worker; then what the benchmark needs, then --set.
  TopologyOverrides overrides;
  overrides.model = args.model;
  const int64_t prompt_len = int64_t(args.shared_prefix_len) + args.input_len;
  const int64_t tokens_per_seq = prompt_len + args.output_len;
  overrides.set = {"model.load_format=" + args.load_format,
                   "model.dtype=" + args.dtype,
                   "engine.max_num_seqs=" + std::to_string(args.concurrency),
                   "engine.max_num_batched_tokens=" +
                       std::to_string(std::max<int64_t>(prompt_len,
                                                        std::min<int64_t>(args.concurrency * prompt_len, 16384))),
                   "groups[0].threads=" + std::to_string(args.threads)};
  overrides.set.insert(overrides.set.end(), args.set.begin(), args.set.end());
  std::vector<std::string> lora_names;
  for (size_t from = 0; !args.lora.empty() && from <= args.lora.size();) {
    const size_t comma = std::min(args.lora.find(',', from), args.lora.size());
    auto name = lora_request_option(args.lora.substr(from, comma - from), overrides.set);
    if (!name) return fail(name.error());
    lora_names.push_back(*name);
    from = comma + 1;
  }
  Result<TopologyConfig> topology =
      args.config.empty() ? parse_topology("model: {path: .}\ngroups: [{name: bench}]\n", "<bench>", overrides)
                          : load_topology(args.config, overrides);
  if (!topology) return fail(topology.error());
  // KV memory for every sequence's whole context, in the KV dtype the topology ends up with, unless --set sizes it.
  const bool sized_by_user = std::any_of(args.set.begin(), args.set.end(), [](const std::string& s) {
    return s.rfind("engine.kv_cache_memory=", 0) == 0;
  });
  if (!sized_by_user) {
    const DType kv_dtype =
        ModelConfig::kv_cache_dtype(topology->engine.kv_cache_dtype, topology->model.dtype, model->torch_dtype);
    topology->engine.kv_cache_memory =
        static_cast<uint64_t>(model->kv_bytes_per_token(kv_dtype)) * (tokens_per_seq + 16) * args.concurrency +
        (16 << 20);
  }
  if (tokens_per_seq > model->max_position_embeddings) {
    return fail({Errc::invalid_argument, "--input-len + --output-len (" + std::to_string(tokens_per_seq) +
                                             ") exceeds the model's context (" +
                                             std::to_string(model->max_position_embeddings) + ")"});
  }

  SamplingOptions sampling;  // what every request takes: the sampling flags and the response format
  sampling.temperature = args.temperature;
  sampling.top_p = args.top_p;
  sampling.top_k = args.top_k;
  if (auto applied = apply_response_format(args.response_format, sampling); !applied) return fail(applied.error());

  EngineOptions options;
  options.log_level = args.log_level;
  options.trace_path = args.trace;
  auto engine = Engine::start(*topology, options);
  if (!engine) return fail(engine.error());
  std::vector<uint32_t> adapters;
  for (const std::string& name : lora_names) {
    auto adapter = lora_request_id(**engine, name);
    if (!adapter) return fail(adapter.error());
    adapters.push_back(*adapter);
  }

  std::mt19937_64 rng(args.seed);
  std::uniform_int_distribution<int32_t> token(3, model->vocab_size - 1);
  std::vector<int32_t> shared_prefix;
  for (int i = 0; i < args.shared_prefix_len; ++i) shared_prefix.push_back(token(rng));
  uint64_t requests_made = 0;
  auto make_request = [&](int input_len, int output_len) {
    GenerateRequest r;
    for (int i = 0; i < input_len; ++i) r.prompt_ids.push_back(token(rng));
    r.max_tokens = static_cast<uint32_t>(output_len);
    r.sampling = sampling;
    r.sampling.seed = requests_made++;
    r.ignore_eos = !sampling.structured();  // a structured text ends at its end of sequence
    if (!adapters.empty()) r.lora = adapters[r.sampling.seed % adapters.size()];
    return r;
  };
  // Warm-up: touches every weight page and every code path once, one prompt of the run's length (a device's
  // libraries load the kernels of a product shape at its first use; a prefill measured cold would count that).
  if (auto warm = (*engine)->generate({make_request(args.input_len, std::min(args.output_len, 2))}); !warm)
    return fail(warm.error());
  auto before = (*engine)->stats();
  if (!before) return fail(before.error());

  std::vector<GenerateRequest> requests;
  for (int i = 0; i < args.num_prompts; ++i) {
    requests.push_back(make_request(args.input_len, args.output_len));
    auto& ids = requests.back().prompt_ids;
    ids.insert(ids.begin(), shared_prefix.begin(), shared_prefix.end());
  }
  const bool progress = !args.json && isatty(STDERR_FILENO);
  const size_t expected = static_cast<size_t>(args.num_prompts) * static_cast<size_t>(args.output_len);
  size_t deltas = 0;
  auto last_draw = std::chrono::steady_clock::now();
  TextCallback on_text;
  if (progress) {
    on_text = [&](size_t, std::string_view) {
      ++deltas;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_draw < std::chrono::milliseconds(100)) return;
      last_draw = now;
      const int width = 40;
      const int filled = static_cast<int>(width * std::min<double>(1.0, double(deltas) / double(expected)));
      std::fprintf(stderr, "\r[%s%s] ~%zu/%zu tokens", std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), deltas, expected);
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto outputs = (*engine)->generate(requests, on_text);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  if (!outputs) return fail(outputs.error());
  auto after = (*engine)->stats();
  if (!after) return fail(after.error());

  std::vector<double> ttft, tpot;
  size_t output_tokens = 0;
  for (const auto& out : *outputs) {
    if (out.error) return fail(*out.error);
    output_tokens += out.generated_ids.size();
    ttft.push_back(out.ttft_ms);
    if (out.generated_ids.size() > 1) {
      tpot.push_back((out.total_ms - out.ttft_ms) / static_cast<double>(out.generated_ids.size() - 1));
    }
  }
  const EngineStats run = stats_between(*before, *after);
  auto rate = [](uint64_t tokens, uint64_t us) { return us ? double(tokens) / (double(us) / 1e6) : 0.0; };
  nlohmann::json j;
  j["model"] = args.model;
  j["architecture"] = model->architecture;
  j["load_format"] = topology->model.load_format;
  j["num_prompts"] = args.num_prompts;
  j["input_len"] = args.input_len;
  j["output_len"] = args.output_len;
  j["shared_prefix_len"] = args.shared_prefix_len;
  j["prefix_cache_hit_rate"] =
      run.prefix_query_blocks ? double(run.prefix_hit_blocks) / double(run.prefix_query_blocks) : 0.0;
  j["concurrency"] = args.concurrency;
  j["temperature"] = args.temperature;
  j["top_p"] = args.top_p;
  j["top_k"] = args.top_k;
  j["response_format"] = args.response_format.format;
  j["threads"] = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  j["isa"] = cpu::isa_name(cpu::detected_isa());
  j["prefill_tokens_per_s"] = rate(run.prefill_tokens, run.prefill_us);
  j["decode_tokens_per_s"] = rate(run.decode_tokens, run.decode_us);
  j["output_tokens_per_s"] = double(output_tokens) / wall_s;
  j["output_tokens"] = output_tokens;
  j["wall_s"] = wall_s;
  j["ttft_ms"] = percentiles(ttft);
  j["tpot_ms"] = percentiles(tpot);
  j["peak_rss_mb"] = peak_rss_mb();
  j.update(step_stats_json(run));
  const int ep = topology->groups[0].ep;
  const ExpertLoadSummary load =
      summarize_expert_load(run.expert_tokens, int(run.num_experts), ep, run.expert_placement);
  if (load.moe_layers > 0) {
    j["expert_tokens"] = run.expert_tokens;  // [layer * num_experts + expert]
    j["num_experts"] = run.num_experts;
    j["expert_max_over_mean"] = load.expert_max_over_mean;
    j["ep"] = ep;
    j["ep_rank_max_over_mean"] = load.rank_max_over_mean;
  }
  if (args.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("actord bench offline: %s (%s, %s weights), %d prompts x (%d in + %d out), concurrency %d, %d threads\n",
              args.model.c_str(), model->architecture.c_str(), topology->model.load_format.c_str(), args.num_prompts,
              args.input_len, args.output_len, args.concurrency, j["threads"].get<int>());
  std::printf("  %-28s %10.1f\n", "prefill tokens/s", j["prefill_tokens_per_s"].get<double>());
  std::printf("  %-28s %10.1f\n", "decode tokens/s (S_TG)", j["decode_tokens_per_s"].get<double>());
  std::printf("  %-28s %10.1f\n", "output tokens/s (wall)", j["output_tokens_per_s"].get<double>());
  std::printf("  %-28s %10.2f %10.2f %10.2f  (p50 p90 p99)\n", "TTFT ms", percentile(ttft, 50), percentile(ttft, 90),
              percentile(ttft, 99));
  std::printf("  %-28s %10.2f %10.2f %10.2f  (p50 p90 p99)\n", "TPOT ms", percentile(tpot, 50), percentile(tpot, 90),
              percentile(tpot, 99));
  std::printf("  %-28s %10.1f\n", "peak RSS MB", j["peak_rss_mb"].get<double>());
  std::printf("  %-28s %10.1f / %.1f / %.1f / %.1f / %.1f / %.1f\n",
              "per step us: step/worker/comm/idle/sched/send", j["step_us_mean"].get<double>(),
              j["worker_compute_us_mean"].get<double>(), j["worker_comm_us_mean"].get<double>(),
              j["worker_idle_us_mean"].get<double>(), j["scheduler_us_mean"].get<double>(),
              j["scheduler_send_us_mean"].get<double>());
  if (run.draft_tokens > 0)
    std::printf("  %-28s %10.2f  (%llu of %llu drafts)\n", "speculative: drafts kept",
                j["draft_acceptance"].get<double>(),
                static_cast<unsigned long long>(run.accepted_draft_tokens),
                static_cast<unsigned long long>(run.draft_tokens));
  if (load.moe_layers > 0) {
    std::printf("  %-28s %10.2f  (busiest / mean expert, %d MoE layers, %llu routed)\n", "expert load max/mean",
                load.expert_max_over_mean, load.moe_layers, static_cast<unsigned long long>(load.routed));
    if (ep > 1) std::printf("  %-28s %10.2f  (busiest / mean of %d ranks)\n", "EP rank load max/mean",
                            load.rank_max_over_mean, ep);
  }
  return 0;
}

}  // namespace actord::cli
