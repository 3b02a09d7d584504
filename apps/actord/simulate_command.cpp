// actord simulate: predicts what `actord bench serve` would measure against `actord serve TOPOLOGY`, from a cost
// profile `actord calibrate` measured (sim/serving_simulator.hpp): the same requests (random ids, or a JSONL
// dataset's prompts encoded by the model's tokenizer) and Poisson arrivals for the same flags and seed, played
// through the topology's replicas, batchers and router on a simulated clock. Prints bench serve's report
// (throughput, TTFT / TPOT / ITL / E2E) and each replica's busy share, steps, preemptions and hand-offs.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "apps/actord/bench_serve_dataset.hpp"
#include "apps/actord/commands.hpp"
#include "apps/actord/load_report.hpp"
#include "apps/actord/replica_shapes.hpp"
#include "core/host_cpus.hpp"
#include "sim/serving_simulator.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord::cli {

CLI::App* add_simulate_command(CLI::App& app, SimulateArgs& args) {
  auto* cmd = app.add_subcommand("simulate",
                                 "Predict bench serve's figures for a topology from a cost profile (actord calibrate), "
                                 "without running it");
  add_common_options(cmd, args.common, "warn", false);
  cmd->add_option("--profile", args.profile, "Cost profile written by actord calibrate")->required();
  cmd->add_option("--cores", args.cores, "Cores of the machine simulated (default: this machine's)");
  cmd->add_option("--replica-start", args.replica_start,
                  "Seconds a replica added by groups[].autoscale takes to serve after the decision")
      ->capture_default_str();
  BenchServeArgs& w = args.workload;
  cmd->add_option("--num-prompts", w.num_prompts, "Requests in total")->capture_default_str();
  cmd->add_option("--concurrency", w.concurrency, "Requests in flight at most")->capture_default_str();
  cmd->add_option("--request-rate", w.request_rate, "Requests per second, Poisson arrivals (0: all at once)")
      ->capture_default_str();
  cmd->add_option("--input-len", w.input_len, "Prompt tokens (random ids)")->capture_default_str();
  cmd->add_option("--output-len", w.output_len, "Tokens to generate")->capture_default_str();
  cmd->add_option("--random-range-ratio", w.range_ratio, "Lengths drawn from [len * (1 - r), len * (1 + r)]")
      ->capture_default_str();
  cmd->add_option("--vocab", w.vocab, "Prompt ids are drawn from [3, vocab)")->capture_default_str();
  cmd->add_option("--warmup", w.warmup, "Requests bench serve would send first (drawn, not simulated)")
      ->capture_default_str();
  cmd->add_option("--dataset", w.dataset,
                  "JSONL prompts (ShareGPT, OpenAI messages or {\"prompt\", \"output_len\"} lines) instead of random "
                  "ids, as bench serve reads them");
  cmd->add_option("--tokenizer", w.tokenizer,
                  "Model folder whose tokenizer measures and encodes dataset prompts (default: the topology's model)");
  cmd->add_option("--max-model-len", w.max_model_len, "Dataset pairs longer than this in all are skipped")
      ->capture_default_str();
  cmd->add_option("--seed", w.seed, "Seed of the prompts and arrivals")->capture_default_str();
  cmd->add_flag("--json", w.json, "Print the report as JSON instead of a table");
  return cmd;
}

int run_simulate(const SimulateArgs& args) {
  if (!apply_log_level(args.common.log_level)) return 2;
  const BenchServeArgs& w = args.workload;
  if (auto checked = check_workload(w); !checked) return fail(checked.error());
  if (args.cores < 0)
    return fail({Errc::invalid_argument, "--cores: must be at least 0, got " + std::to_string(args.cores)});
  auto profile = sim::CostProfile::load(args.profile);
  if (!profile) return fail(profile.error());
  auto topology = load_topology_of(args.common);
  if (!topology) return fail(topology.error());
  auto model = check_model_folder(*topology);
  if (!model) return fail(model.error());
  if (!(args.replica_start >= 0))
    return fail({Errc::invalid_argument, "--replica-start: must be at least 0, got " + std::to_string(args.replica_start)});
  auto fleet = simulated_fleet(*topology, *model, *profile, args.cores > 0 ? unsigned(args.cores) : usable_cpu_cores(),
                               args.replica_start);
  if (!fleet) return fail(fleet.error());

  // bench serve's requests and arrivals: the same generator, drawn in the same order. Dataset prompts are text: the
  // tokenizer encodes them as the server would.
  BenchServeArgs workload = w;
  if (!workload.dataset.empty() && workload.tokenizer.empty()) workload.tokenizer = topology->model.path.string();
  std::optional<Tokenizer> tokenizer;
  if (!workload.dataset.empty()) {
    auto loaded = Tokenizer::load(workload.tokenizer);
    if (!loaded) return fail({Errc::invalid_argument, "--tokenizer: " + loaded.error().message});
    tokenizer.emplace(std::move(*loaded));
  }
  std::mt19937_64 rng(w.seed);
  auto drawn = make_bench_requests(workload, w.warmup + w.num_prompts, rng);
  if (!drawn) return fail(drawn.error());
  std::exponential_distribution<double> gap(w.request_rate > 0 ? w.request_rate : 1.0);
  if (w.request_rate > 0)
    for (int i = 0; i < w.warmup; ++i) gap(rng);
  std::vector<sim::SimRequest> requests;
  double at = 0;
  for (int i = 0; i < w.num_prompts; ++i) {
    const BenchRequest& b = (*drawn)[size_t(w.warmup + i)];
    requests.push_back({at, b.prompt_text ? tokenizer->encode(*b.prompt_text) : b.prompt_ids, uint32_t(b.output_len)});
    if (w.request_rate > 0) at += gap(rng);
  }
  auto report = sim::simulate(*fleet, requests, w.concurrency);
  if (!report) return fail(report.error());

  LoadReport figures;
  for (size_t i = 0; i < report->requests.size(); ++i) {
    const sim::SimOutcome& o = report->requests[i];
    if (!o.error.empty() || o.token_s.empty()) figures.add_failure(o.error.empty() ? "no tokens" : o.error);
    else figures.add(o.sent_s, o.token_s, requests[i].prompt.size(), o.token_s.size());
  }
  const double wall = report->end_s > 0 ? report->end_s : 1e-9;
  nlohmann::json out = figures.json(w, wall);
  out["simulated"] = true;
  out["topology"] = topology->source.string();
  out["profile"] = args.profile;
  nlohmann::json replicas = nlohmann::json::array();
  for (const sim::SimReplicaStats& r : report->replicas)
    replicas.push_back({{"group", r.group},
                        {"steps", r.steps},
                        {"busy", r.busy_s / wall},
                        {"prefill_tokens", r.prefill_tokens},
                        {"decode_tokens", r.decode_tokens},
                        {"preemptions", r.preemptions},
                        {"handoffs", r.handoffs}});
  out["replicas"] = replicas;
  nlohmann::json resizes = nlohmann::json::array();
  for (const sim::SimResize& r : report->resizes)
    resizes.push_back({{"at", r.at_s}, {"group", r.group}, {"from", r.from}, {"to", r.to}});
  out["resizes"] = resizes;
  if (w.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    LoadReport::print(out, LoadReport::title("actord simulate: " + topology->source.string(), w));
    for (size_t r = 0; r < report->replicas.size(); ++r) {
      const sim::SimReplicaStats& s = report->replicas[r];
      std::printf("  replica %zu (%s): busy %.0f%%, %llu steps, %llu preemptions, %llu hand-offs\n", r, s.group.c_str(),
                  100.0 * s.busy_s / wall, static_cast<unsigned long long>(s.steps),
                  static_cast<unsigned long long>(s.preemptions), static_cast<unsigned long long>(s.handoffs));
    }
    for (const sim::SimResize& r : report->resizes)
      std::printf("  autoscale: group %s %d -> %d replicas at %.1f s\n", r.group.c_str(), r.from, r.to, r.at_s);
  }
  return figures.failed() == 0 ? 0 : 1;
}

}  // namespace actord::cli
