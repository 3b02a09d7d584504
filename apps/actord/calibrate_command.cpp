// actord calibrate: measures how long a topology's replicas take per step, for `actord simulate`. For each replica
// shape among the topology's groups it starts that group alone (one replica) with --trace, runs a fixed grid of
// batches through it (decode batches of 1, 2, 4, ... sequences, long contexts, prefills of several lengths), reads
// every scheduler step's shape and share of the wall clock from the trace and fits the step cost model
// (sim/step_cost_model.hpp). A topology with a prefill and a decode group also gets its hand-off measured: the
// gap between a request's first and second token beyond a decode step, for prompts of several lengths, fitted as a
// fixed time plus a time per KV position. The entries are added to the profile file (those of the same shape
// replaced), so one file can hold every shape of a machine. With --from-trace the steps come from a trace the
// engine wrote while serving (actord serve --trace under a real load), so the costs include whatever shared the
// cores meanwhile (HTTP, tokenizers, a load generator on the same machine); each shape from the steps of its groups
// (every scheduler step names its group); an entry the profile already has for
// the shape (a grid calibration) fills in the step sizes the trace lacks, scaled as the trace measured its
// nearest sizes against it.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "actors/engine.hpp"
#include "apps/actord/commands.hpp"
#include "apps/actord/replica_shapes.hpp"
#include "core/host_cpus.hpp"
#include "executors/cpu/cpu_features.hpp"
#include "sim/trace_steps.hpp"

namespace actord::cli {
namespace {

using clock_type = std::chrono::steady_clock;

struct Workload {
  std::mt19937_64 rng{7};
  int vocab = 512;
  std::vector<int32_t> prompt(int len) {
    std::uniform_int_distribution<int32_t> id(3, vocab - 1);
    std::vector<int32_t> ids(static_cast<size_t>(len));
    for (auto& t : ids) t = id(rng);
    return ids;
  }
  GenerateRequest request(int prompt_len, int max_tokens) {
    GenerateRequest r;
    r.prompt_ids = prompt(prompt_len);
    r.max_tokens = uint32_t(max_tokens);
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    return r;
  }
};

// The steps of the schedulers of the trace `file` (of `groups` only, when given), past each one's step `skip`.
Result<std::vector<sim::MeasuredStep>> steps_of_trace_file(const std::filesystem::path& file, uint64_t skip,
                                                           const std::vector<std::string>& groups = {}) {
  std::ifstream in(file);
  if (!in) return Error{Errc::invalid_argument, file.string() + ": cannot read the trace"};
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  return sim::steps_of_trace(doc, skip, file.string(), groups);
}

// One replica of group `gi` alone, through the grid; its steps.
Result<std::vector<sim::MeasuredStep>> measure_group(const TopologyConfig& topology, size_t gi, int threads,
                                                     const CheckedModel& model, const CalibrateArgs& args) {
  TopologyConfig alone = topology;
  alone.groups = {topology.groups[gi]};
  GroupSection& g = alone.groups.front();
  g.replicas = 1;
  g.role = ReplicaRole::both;
  g.threads = threads;
  alone.speculative = {};
  const auto trace = std::filesystem::temp_directory_path() /
                     ("actord-calibrate-" + std::to_string(getpid()) + "-" + std::to_string(gi) + ".json");
  uint64_t warm_steps = 0;
  {
    EngineOptions options;
    options.log_level = args.common.log_level;
    options.trace_path = trace;
    auto engine = Engine::start(alone, options);
    if (!engine) return engine.error();
    Workload w;
    w.vocab = model.config.vocab_size;
    const int context = model.max_model_len;
    auto run = [&](std::vector<GenerateRequest> batch) -> Status {
      auto out = (*engine)->generate(batch);
      if (!out) return out.error();
      for (const auto& o : *out)
        if (o.error) return *o.error;
      return {};
    };
    ACTORD_TRY_STATUS(run({w.request(std::min(16, context / 4), 4)}));
    auto stats = (*engine)->stats();
    if (!stats) return stats.error();
    warm_steps = stats->steps;
    const int out_len = std::min(32, context / 4);
    const int most = std::min(args.max_batch, topology.engine.max_num_seqs);
    for (int b = 1; b <= most; b *= 2) {  // decode batches, short contexts
      std::vector<GenerateRequest> batch;
      for (int i = 0; i < b; ++i) batch.push_back(w.request(std::min(32, context / 4), out_len));
      ACTORD_TRY_STATUS(run(batch));
    }
    const int long_prompt = std::min(1024, context / 2);
    for (int b : {1, std::min(8, most)}) {  // long contexts: attention's share
      std::vector<GenerateRequest> batch;
      for (int i = 0; i < b; ++i) batch.push_back(w.request(long_prompt, std::min(16, context / 8)));
      ACTORD_TRY_STATUS(run(batch));
    }
    for (int p = 64; p <= std::min(2048, context - 8); p *= 4) ACTORD_TRY_STATUS(run({w.request(p, 2)}));  // prefills
  }  // the engine stops and writes the trace
  auto steps = steps_of_trace_file(trace, warm_steps);
  std::error_code ec;
  std::filesystem::remove(trace, ec);
  return steps;
}

// The hand-off of `topology`'s first prefill group to its decode group: the second token's gap beyond the decode
// step `decode` predicts, for prompts of several lengths, fitted as fixed + per KV position.
Result<sim::HandOffCost> measure_handoff(const TopologyConfig& topology, const CheckedModel& model,
                                         const sim::StepCostModel& decode, const CalibrateArgs& args) {
  TopologyConfig pd = topology;
  for (GroupSection& g : pd.groups) g.replicas = 1;
  pd.speculative = {};
  EngineOptions options;
  options.log_level = args.common.log_level;
  auto engine = Engine::start(pd, options);
  if (!engine) return engine.error();
  Workload w;
  w.vocab = model.config.vocab_size;
  std::vector<std::pair<double, double>> samples;  // (KV positions, us beyond the decode step)
  const int context = model.max_model_len;
  for (int round = 0; round < 2; ++round) {
    for (int p = 32; p <= std::min(2048, context - 8); p *= 2) {
      std::mutex mu;
      std::condition_variable cv;
      std::vector<clock_type::time_point> tokens;
      bool done = false;
      std::optional<Error> error;
      (*engine)->submit(w.request(p, 3), [&](const StreamEvent& e) {
        std::lock_guard lock(mu);
        for (size_t i = 0; i < e.token_ids.size(); ++i) tokens.push_back(clock_type::now());
        if (e.error) error = e.error;
        if (!e.finish_reason.empty()) {
          done = true;
          cv.notify_all();
        }
      });
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return done; });
      if (error) return *error;
      if (round == 0 || tokens.size() < 2) continue;  // the first round warms both replicas up
      const double gap_us = std::chrono::duration<double, std::micro>(tokens[1] - tokens[0]).count();
      StepShape step;
      step.decode_tokens = 1;
      step.sequences = 1;
      step.attention_pairs = uint64_t(p) + 1;
      samples.push_back({double(p), std::max(0.0, gap_us - decode.predict_us(step))});
    }
  }
  if (samples.size() < 2) return Error{Errc::internal, "too few hand-offs measured to fit their cost"};
  double mx = 0, my = 0;
  for (auto [x, y] : samples) mx += x, my += y;
  mx /= double(samples.size());
  my /= double(samples.size());
  double sxy = 0, sxx = 0;
  for (auto [x, y] : samples) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
  sim::HandOffCost cost;
  cost.per_token_us = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  cost.fixed_us = std::max(0.0, my - cost.per_token_us * mx);
  cost.samples = samples.size();
  return cost;
}

}  // namespace

CLI::App* add_calibrate_command(CLI::App& app, CalibrateArgs& args) {
  auto* cmd = app.add_subcommand("calibrate",
                                 "Measure a topology's replicas per step into a cost profile for actord simulate "
                                 "(each replica shape runs alone through a fixed grid of batches)");
  add_common_options(cmd, args.common, "warn", false);
  cmd->add_option("-o,--output", args.output, "Cost profile (JSON) to write; entries of other shapes are kept")
      ->required();
  cmd->add_option("--max-batch", args.max_batch, "Largest decode batch measured (powers of two up to it)")
      ->capture_default_str();
  cmd->add_option("--from-trace", args.from_trace,
                  "Fit the steps of this --trace of the topology (e.g. actord serve --trace under a real load) "
                  "instead of running the grid: the step times under serving conditions");
  return cmd;
}

int run_calibrate(const CalibrateArgs& args) {
  if (!apply_log_level(args.common.log_level)) return 2;
  if (args.max_batch < 1) return fail({Errc::invalid_argument, "--max-batch: must be at least 1"});
  auto topology = load_topology_of(args.common);
  if (!topology) return fail(topology.error());
  auto model = check_model_folder(*topology);
  if (!model) return fail(model.error());
  auto plan = plan_topology(*topology, model_shape(*model), usable_cpu_cores());
  if (!plan) return fail(plan.error());
  sim::CostProfile profile;
  if (std::filesystem::exists(args.output)) {
    auto old = sim::CostProfile::load(args.output);
    if (!old) return fail(old.error());
    profile = std::move(*old);
  }
  profile.cpu = cpu::CpuFeatures::detect().model;
  profile.source = topology->source.string();
  // The topology's distinct replica shapes, each with the groups of that shape (--from-trace: the trace's steps of
  // those groups price it; with one shape, every step) and the first of them (whose plan sizes its KV pool).
  struct ShapeGroups {
    sim::ReplicaShape shape;
    size_t first = 0;
    std::vector<std::string> groups;
  };
  std::vector<ShapeGroups> shapes;
  std::vector<size_t> shape_of_group;  // each group's index in shapes
  for (size_t gi = 0; gi < topology->groups.size(); ++gi) {
    auto shape = replica_shape(*topology, *plan, gi, *model);
    if (!shape) return fail(shape.error());
    const size_t k = size_t(std::find_if(shapes.begin(), shapes.end(),
                                         [&](const ShapeGroups& s) { return s.shape == *shape; }) -
                            shapes.begin());
    if (k == shapes.size()) shapes.push_back({*shape, gi, {}});
    shapes[k].groups.push_back(topology->groups[gi].name);
    shape_of_group.push_back(k);
  }
  for (const ShapeGroups& s : shapes) {
    const size_t gi = s.first;
    std::fprintf(stderr, "calibrating groups[%zu] (%s): %s%s\n", gi, topology->groups[gi].name.c_str(),
                 s.shape.describe().c_str(), args.from_trace.empty() ? "" : (" from " + args.from_trace).c_str());
    const std::vector<std::string> groups = shapes.size() > 1 ? s.groups : std::vector<std::string>{};
    auto steps = args.from_trace.empty() ? measure_group(*topology, gi, s.shape.threads, *model, args)
                                         : steps_of_trace_file(args.from_trace, 1, groups);
    if (!steps) return fail(steps.error());
    if (!args.from_trace.empty() && steps->empty()) {
      std::string names;
      for (const std::string& g : groups) names += (names.empty() ? "'" : ", '") + g + "'";
      return fail({Errc::invalid_argument, "--from-trace: " + args.from_trace + " has no steps" +
                                               (groups.empty() ? "" : " of the groups " + names) +
                                               " (a trace of actord serve --trace with this topology has them)"});
    }
    // A trace's steps on top of the profile's entry for the shape (a grid calibration): it fills the size classes
    // the served load never ran.
    std::optional<sim::StepCostModel> prior;
    if (!args.from_trace.empty())
      if (auto entry = profile.find(s.shape, ""); entry.ok()) prior = (*entry)->cost;
    auto cost = sim::StepCostModel::fit(*steps, prior ? &*prior : nullptr);
    if (!cost) return fail(Error{Errc::internal, "groups[" + std::to_string(gi) + "]: " + cost.error().message});
    std::printf("groups[%zu] %s: %zu steps%s, %zu knots, %.3g us per attention pair; per step error median %.1f%%, "
                "p90 %.1f%%; all steps' time %+.1f%%\n",
                gi, s.shape.describe().c_str(), cost->num_steps(),
                prior ? " (sizes the trace lacks from the profile's entry)" : "", cost->knots().size(),
                cost->per_pair_us(), 100 * cost->median_error(), 100 * cost->p90_error(), 100 * cost->total_error());
    profile.put({s.shape, plan->groups[gi].num_kv_blocks, *cost});
  }
  // The hand-off is measured beyond the decode group's step (the first decode group's shape).
  std::optional<sim::StepCostModel> decode_cost;
  for (size_t gi = 0; gi < topology->groups.size() && !decode_cost; ++gi)
    if (topology->groups[gi].role == ReplicaRole::decode)
      decode_cost = (*profile.find(shapes[shape_of_group[gi]].shape, ""))->cost;
  const bool disaggregated = std::any_of(topology->groups.begin(), topology->groups.end(),
                                         [](const GroupSection& g) { return g.role == ReplicaRole::prefill; });
  if (disaggregated && decode_cost) {
    std::fprintf(stderr, "calibrating the prefill -> decode hand-off\n");
    auto handoff = measure_handoff(*topology, *model, *decode_cost, args);
    if (!handoff) return fail(handoff.error());
    std::printf("hand-off: %.0f us + %.2f us per KV position (%zu hand-offs)\n", handoff->fixed_us,
                handoff->per_token_us, handoff->samples);
    profile.handoff = *handoff;
  }
  if (auto saved = profile.save(args.output); !saved) return fail(saved.error());
  std::printf("cost profile: %s (%zu replica shapes, CPU %s)\n", args.output.c_str(), profile.replicas.size(),
              profile.cpu.c_str());
  return 0;
}

}  // namespace actord::cli
