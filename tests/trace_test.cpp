// --trace: every rank's steps as Chrome trace JSON (actors/trace_sink.hpp): each rank of a tp2 replica in processes
// reports its phases per layer, its collectives with their bytes, its idle time and (the driver) sampling; the
// scheduler its steps; clocks are one machine's, so a step's rank spans lie inside the scheduler's span of it (a rank on
// another machine is shifted onto the engine's clock by its step round trips);
// bench/trace_overlap.py summarises the file. An unwritable --trace path is refused at start.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "actors/trace_sink.hpp"
#include "cli_util.hpp"
#include "comms/capnp_codec.hpp"
#include "core/step_trace.hpp"
#include "engine_test_util.hpp"

using namespace actord;

namespace {

// Two requests of 12 tokens (sampled at `temperature`) through configs/tp2.yaml with --trace `file`, written when
// the engine stops; the engine's steps.
uint64_t run_traced_tp2(const std::filesystem::path& file, float temperature) {
  EngineOptions options = test::engine_options();
  options.trace_path = file;
  auto engine = Engine::start(test::quickstart("configs/tp2.yaml"), options);
  REQUIRE(engine.ok());
  GenerateRequest r;
  r.prompt = "Once upon a time";
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  REQUIRE((*engine)->generate({r, r}).ok());
  auto stats = (*engine)->stats();
  REQUIRE(stats.ok());
  return stats->steps;
}

}  // namespace

TEST_CASE("trace: a tp2 replica's ranks and scheduler, per step and layer, on one clock", "[trace]") {
  test::TempDir tmp;
  const auto file = tmp.path() / "trace.json";
  const uint64_t steps = run_traced_tp2(file, 1.0f);
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
  uint64_t prefill = 0, decode = 0, pairs = 0, share_us = 0;  // the scheduler steps' shapes, summed
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string& track = tracks.at(e["pid"].get<int>());
    ++count[track][e["name"].get<std::string>()];
    const double start = e["ts"], end = start + e["dur"].get<double>();
    const uint64_t step = e["args"]["step"];
    if (track == "replica/0/scheduler") {
      scheduler_step[step] = {start, end};
      prefill += e["args"]["prefill_tokens"].get<uint64_t>();
      decode += e["args"]["decode_tokens"].get<uint64_t>();
      pairs += e["args"]["attention_pairs"].get<uint64_t>();
      share_us += e["args"]["share_us"].get<uint64_t>();
      CHECK(e["args"]["group"] == "main");  // the topology group of the replica
      CHECK(e["args"]["tokens"].get<uint64_t>() ==
            e["args"]["prefill_tokens"].get<uint64_t>() + e["args"]["decode_tokens"].get<uint64_t>());
    } else if (e["name"] == "step") rank_steps.push_back({step, {start, end}});
    if (e["name"] == "all_reduce") all_reduce_bytes = std::max<uint64_t>(all_reduce_bytes, e["args"]["bytes"]);
  }
  CHECK(count["replica/0/scheduler"]["step"] == int(steps));
  // Shapes: both prompts prefilled once, 11 decode rows each (the 12th token ends them: nothing planned past it);
  // each prompt of P tokens attends P (P + 1) / 2 pairs, decode row j of a sequence P + j + 1 positions.
  CHECK(decode == 22);
  REQUIRE(prefill % 2 == 0);
  const uint64_t p = prefill / 2;
  CHECK(pairs == 2 * (p * (p + 1) / 2) + 2 * (11 * p + 11 * 12 / 2));
  CHECK(share_us > 0);
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

TEST_CASE("trace: greedy-only steps of a tp2 replica exchange each row's best - not its logits", "[trace]") {
  // The largest all_gather of each run: whole rows of logits when sampling draws, 8 bytes a row when every row is
  // greedy (sampler.hpp's RowBest).
  auto largest_gather = [](float temperature) {
    test::TempDir tmp;
    const auto file = tmp.path() / "trace.json";
    run_traced_tp2(file, temperature);
    std::ifstream in(file);
    const nlohmann::json doc = nlohmann::json::parse(in);
    uint64_t largest = 0;
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "X" && e["name"] == "all_gather" && e["args"].contains("bytes"))
        largest = std::max(largest, static_cast<uint64_t>(e["args"]["bytes"].get<double>()));
    return largest;
  };
  CHECK(largest_gather(0.8f) >= 2 * 512 * sizeof(float) / 2);  // 2 rows of stories260K's 512 logits, half from the peer
  CHECK(largest_gather(0.0f) <= 2 * 8);
}

TEST_CASE("trace: an unwritable --trace file is refused at start, naming it", "[trace][cli]") {
  const auto r = test::run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1", "--max-tokens", "2",
                                   "--trace", "/nonexistent-dir/t.json"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("--trace: cannot write /nonexistent-dir/t.json"));
}

namespace {

// A StepResult of rank `rank` whose clock is `clock_id`, with a "step" span [start, start + dur) and an
// "attention" span inside it.
wire_msg traced_result(const std::string& rank, const std::string& clock_id, uint64_t start, uint64_t dur) {
  return build<wire::StepResult>([&](wire::StepResult::Builder out) {
    out.setRank(rank);
    out.setClockId(clock_id);
    auto spans = out.initTrace(2);
    spans[0].setName("attention");
    spans[0].setCategory("compute");
    spans[0].setStartNs(start + 100);
    spans[0].setDurNs(dur - 200);
    spans[1].setName("step");
    spans[1].setCategory("step");
    spans[1].setStartNs(start);
    spans[1].setDurNs(dur);
  });
}

}  // namespace

TEST_CASE("trace: a rank on another machine is put on this machine's clock by its step round trips", "[trace]") {
  test::TempDir tmp;
  TraceSink sink(tmp.path() / "t.json");
  // The remote clock reads 5 s more than ours. Step 1: sent at 1000 us, the worker starts 30 us later and runs
  // 400 us, its result arrives 30 us after that (symmetric legs). Step 2: a longer, lopsided round trip (the step
  // queued 500 us at the worker) that must not win.
  const uint64_t skew = 5'000'000'000ull, us = 1000;
  sink.add_result(traced_result("remote/worker/0", "another-boot", skew + 1030 * us, 400 * us), 1, 1000 * us,
                  1460 * us);
  sink.add_result(traced_result("remote/worker/0", "another-boot", skew + 3500 * us, 400 * us), 2, 3000 * us,
                  3930 * us);
  // A rank of this machine (its clock id is ours) is left as it is, round trips or not.
  sink.add_result(traced_result("local/worker/0", StepTrace::clock_id(), 1040 * us, 380 * us), 1, 1000 * us,
                  1460 * us);
  sink.add_scheduler_step("local/scheduler", 1, 1000 * us, 1460 * us, StepShape{0, 1, 1, 1}, 460);
  REQUIRE(sink.write().ok());
  std::ifstream in(tmp.path() / "t.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::map<int, std::string> tracks;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") tracks[e["pid"].get<int>()] = e["args"]["name"];
  std::map<std::pair<std::string, uint64_t>, double> step_start;  // (track, step) -> ts in us
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "step")
      step_start[{tracks.at(e["pid"].get<int>()), e["args"]["step"].get<uint64_t>()}] = e["ts"].get<double>();
  // The origin is the scheduler's send (1000 us): the remote step 1 starts 30 us after it, exactly.
  CHECK(step_start.at({"local/scheduler", 1}) == Approx(0.0));
  CHECK(step_start.at({"remote/worker/0", 1}) == Approx(30.0).margin(0.01));
  CHECK(step_start.at({"remote/worker/0", 2}) == Approx(2500.0).margin(0.01));  // shifted by the same offset
  CHECK(step_start.at({"local/worker/0", 1}) == Approx(40.0).margin(0.01));
}
