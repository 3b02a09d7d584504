// --trace: every rank's steps as Chrome trace JSON (actors/trace_sink.hpp): each rank of a tp2 replica in processes
// reports its phases per layer, its collectives with their bytes, its idle time and (the driver) sampling; the
// scheduler its steps; clocks are one machine's, so a step's rank spans lie inside the scheduler's span of it;
// bench/trace_overlap.py summarises the file. An unwritable --trace path is refused at start.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_util.hpp"
#include "engine_test_util.hpp"

using namespace actord;

TEST_CASE("trace: a tp2 replica's ranks and scheduler, per step and layer, on one clock", "[trace]") {
  test::TempDir tmp;
  const auto file = tmp.path() / "trace.json";
  uint64_t steps = 0;
  {
    EngineOptions options = test::engine_options();
    options.trace_path = file;
    auto engine = Engine::start(test::quickstart("configs/tp2.yaml"), options);
    REQUIRE(engine.ok());
    GenerateRequest r;
    r.prompt = "Once upon a time";
    r.max_tokens = 12;
    r.ignore_eos = true;
    auto out = (*engine)->generate({r, r});
    REQUIRE(out.ok());
    auto stats = (*engine)->stats();
    REQUIRE(stats.ok());
    steps = stats->steps;
  }  // the file is written when the engine stops
  std::ifstream in(file);
  REQUIRE(in.good());
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::map<int, std::string> tracks;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") tracks[e["pid"].get<int>()] = e["args"]["name"];
  std::set<std::string> names;
  for (const auto& [pid, name] : tracks) names.insert(name);
  CHECK(names == std::set<std::string>{"replica/0/scheduler", "replica/0/worker/tp0.pp0", "replica/0/worker/tp1.pp0"});
  std::map<std::string, std::map<std::string, int>> count;  // track -> span name -> spans
  std::map<uint64_t, std::pair<double, double>> scheduler_step;  // step -> [start, end]
  std::vector<std::pair<uint64_t, std::pair<double, double>>> rank_steps;
  uint64_t all_reduce_bytes = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string& track = tracks.at(e["pid"].get<int>());
    ++count[track][e["name"].get<std::string>()];
    const double start = e["ts"], end = start + e["dur"].get<double>();
    const uint64_t step = e["args"]["step"];
    if (track == "replica/0/scheduler") scheduler_step[step] = {start, end};
    else if (e["name"] == "step") rank_steps.push_back({step, {start, end}});
    if (e["name"] == "all_reduce") all_reduce_bytes = std::max<uint64_t>(all_reduce_bytes, e["args"]["bytes"]);
  }
  CHECK(count["replica/0/scheduler"]["step"] == int(steps));
  for (const char* rank : {"replica/0/worker/tp0.pp0", "replica/0/worker/tp1.pp0"}) {
    INFO(rank);
    CHECK(count[rank]["step"] == int(steps));
    CHECK(count[rank]["attention"] == 5 * int(steps));  // stories260K's 5 layers
    CHECK(count[rank]["mlp"] == 5 * int(steps));
    CHECK(count[rank]["all_reduce"] == 11 * int(steps));  // the embedding and 2 per layer
    CHECK(count[rank]["idle"] >= int(steps) - 1);
  }
  CHECK(count["replica/0/worker/tp0.pp0"]["sampling"] == int(steps));  // the driver samples
  CHECK(count["replica/0/worker/tp1.pp0"]["sampling"] == 0);
  CHECK(all_reduce_bytes > 0);
  // One clock: a rank's step lies within the scheduler's span of it (sent before, answered after).
  for (const auto& [step, span] : rank_steps) {
    INFO("step " << step);
    REQUIRE(scheduler_step.count(step));
    CHECK(span.first >= scheduler_step[step].first);
    CHECK(span.second <= scheduler_step[step].second + 1.0);  // microsecond rounding
  }
  // The summary script reads it.
  const std::string summary = (tmp.path() / "summary.json").string();
  REQUIRE(std::system(("python3 " + (test::source_dir() / "bench/trace_overlap.py").string() + " " + file.string() +
                       " --json > " + summary)
                          .c_str()) == 0);
  std::ifstream s(summary);
  const nlohmann::json sum = nlohmann::json::parse(s);
  REQUIRE(sum["ranks"].size() == 2);
  for (const auto& r : sum["ranks"]) {
    CHECK(r["steps"] == steps);
    CHECK(r["comm_ms"].get<double>() > 0);
    CHECK(r["overlap"].get<double>() == 0.0);  // no two-batch overlap: no collective hides behind compute
  }
}

TEST_CASE("trace: an unwritable --trace file is refused at start, naming it", "[trace][cli]") {
  const auto r = test::run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1", "--max-tokens", "2",
                                   "--trace", "/nonexistent-dir/t.json"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("--trace: cannot write /nonexistent-dir/t.json"));
}
