// actord calibrate and actord simulate through the CLI on the bundled model: a calibration of the quickstart
// topology gives a profile that simulate plays bench serve's workload through (every request completed, its
// report in bench serve's keys), and topologies, profiles and flags it cannot use are refused with one line naming
// the key.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
using actord::test::run_actord;

namespace {

void check_refused(const test::RunResult& r, const std::string& message) {
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(message));
}

// One actord command line: the subcommand, the topology (its file and --set arguments), then the other flags.
std::vector<std::string> command(const std::string& subcommand, const std::vector<std::string>& topology,
                                 const std::vector<std::string>& flags) {
  std::vector<std::string> line{subcommand};
  line.insert(line.end(), topology.begin(), topology.end());
  line.insert(line.end(), flags.begin(), flags.end());
  return line;
}

}  // namespace

TEST_CASE("calibrate then simulate: the quickstart topology's profile predicts bench serve's report",
          "[cli][sim]") {
  test::TempDir tmp;
  const std::string profile = (tmp.path() / "profile.json").string();
  // One thread per rank, so that two replicas on this machine have the same shape.
  const std::vector<std::string> one_thread = {"configs/quickstart.yaml", "--set", "groups[0].threads=1"};
  const auto calibrated = run_actord(command("calibrate", one_thread, {"-o", profile, "--max-batch", "8"}));
  INFO(calibrated.err);
  REQUIRE(calibrated.exit_code == 0);
  CHECK_THAT(calibrated.out, Catch::Contains("groups[0] tp 1 x pp 1, ep 1") && Catch::Contains("cost profile: "));
  std::ifstream in(profile);
  const auto p = nlohmann::json::parse(in);
  REQUIRE(p.at("replicas").size() == 1);
  const auto& cost = p["replicas"][0]["cost"];
  CHECK(cost.at("steps").get<int>() >= 40);
  CHECK(cost.at("knots").size() >= 2);

  const std::vector<std::string> workload = {"--profile", profile, "--num-prompts", "20", "--request-rate", "50",
                                             "--input-len", "24", "--output-len", "16", "--json"};
  const auto simulated = run_actord(command("simulate", one_thread, workload));
  INFO(simulated.err);
  REQUIRE(simulated.exit_code == 0);
  const auto report = nlohmann::json::parse(simulated.out);
  CHECK(report.at("simulated") == true);
  CHECK(report.at("completed") == 20);
  CHECK(report.at("failed") == 0);
  CHECK(report.at("total_output_tokens") == 20 * 16);
  CHECK(report.at("ttft_ms").at("median").get<double>() > 0);
  CHECK(report.at("itl_ms").at("p99").get<double>() > 0);
  REQUIRE(report.at("replicas").size() == 1);
  CHECK(report["replicas"][0].at("steps").get<int>() >= 16);

  // The same seed and flags give the same prediction; a dp2 of the same replica shape is priced from it too.
  CHECK(run_actord(command("simulate", one_thread, workload)).out == simulated.out);
  std::vector<std::string> dp2 = workload;
  dp2.insert(dp2.end(), {"--set", "groups[0].replicas=2"});
  const auto two = run_actord(command("simulate", one_thread, dp2));
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  CHECK(nlohmann::json::parse(two.out).at("replicas").size() == 2);

  // Refused: a shape the profile lacks (named with what it has), a prefill group without a measured hand-off, AFD.
  check_refused(run_actord({"simulate", "configs/quickstart.yaml", "--set", "groups[0].threads=2", "--profile",
                            profile}),
                "configs/quickstart.yaml: groups[0]: the cost profile has no replica of tp 1 x pp 1, ep 1, 2 threads "
                "per rank, thread, cpu");
  check_refused(run_actord({"simulate", "configs/pd.yaml", "--profile", profile}),
                "configs/pd.yaml: groups[0]: the cost profile has no replica of");
  check_refused(run_actord({"simulate", "configs/afd.yaml", "--profile", profile}),
                "configs/afd.yaml: groups[0].afd: the simulator does not model AFD pools");
  check_refused(run_actord(command("simulate", one_thread, {"--profile", profile, "--concurrency", "0"})),
                "--concurrency: must be at least 1, got 0");
  check_refused(run_actord(command("simulate", one_thread, {"--profile", profile, "--request-rate", "-1"})),
                "--request-rate must be a finite number >= 0");
}

TEST_CASE("simulate plays a JSONL dataset's prompts, encoded by the model's tokenizer, with their replies' lengths",
          "[cli][sim]") {
  test::TempDir tmp;
  const std::string profile = (tmp.path() / "profile.json").string();
  REQUIRE(run_actord({"calibrate", "configs/quickstart.yaml", "-o", profile, "--max-batch", "4"}).exit_code == 0);
  const auto dataset = tmp.path() / "conversations.jsonl";
  {
    std::ofstream f(dataset);
    f << R"({"conversations": [{"from": "human", "value": "Once upon a time there was a dog named Max."}, )"
         R"({"from": "gpt", "value": "Max liked to play in the park with his red ball."}]})" << "\n"
      << R"({"prompt": "Tom had a ball.", "output_len": 7})" << "\n";
  }
  const auto tokenizer = Tokenizer::load(test::stories_dir());
  REQUIRE(tokenizer);
  const size_t reply = tokenizer->encode("Max liked to play in the park with his red ball.", false).size();
  const size_t prompts = tokenizer->encode("Once upon a time there was a dog named Max.").size() +
                         tokenizer->encode("Tom had a ball.").size();
  const auto r = run_actord({"simulate", "configs/quickstart.yaml", "--profile", profile, "--dataset",
                             dataset.string(), "--num-prompts", "4", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto report = nlohmann::json::parse(r.out);
  CHECK(report.at("completed") == 4);
  CHECK(report.at("total_output_tokens") == 2 * (reply + 7));  // two usable lines, cycled
  CHECK(report.at("total_input_tokens") == 2 * prompts);
  check_refused(run_actord({"simulate", "configs/quickstart.yaml", "--profile", profile, "--dataset",
                            (tmp.path() / "none.jsonl").string()}),
                "none.jsonl");
}

TEST_CASE("simulate refuses a missing or malformed profile, naming the file and key", "[cli][sim]") {
  test::TempDir tmp;
  const std::string missing = (tmp.path() / "none.json").string();
  check_refused(run_actord({"simulate", "configs/quickstart.yaml", "--profile", missing}),
                missing + ": cannot read the cost profile");
  const std::string bad = (tmp.path() / "bad.json").string();
  std::ofstream(bad) << "{\"version\": 1, \"replicas\": [{\"shape\": {\"model\": \"m\", \"device\": \"cpu\", "
                        "\"placement\": \"thread\", \"tp\": 0}}]}";
  check_refused(run_actord({"simulate", "configs/quickstart.yaml", "--profile", bad}),
                bad + ": replicas[0].shape.tp: expected an integer of at least 1");
  check_refused(run_actord({"calibrate", "configs/quickstart.yaml", "-o", bad, "--max-batch", "0"}),
                "--max-batch: must be at least 1");
}

TEST_CASE("calibrate --from-trace fits a run's traced steps on top of the grid's entry - traces it cannot use are "
          "refused", "[cli][sim]") {
  test::TempDir tmp;
  const std::string profile = (tmp.path() / "profile.json").string(), trace = (tmp.path() / "run.json").string();
  const std::vector<std::string> topology = {"configs/quickstart.yaml", "--set", "groups[0].threads=1"};
  REQUIRE(run_actord(command("calibrate", topology, {"-o", profile, "--max-batch", "4"})).exit_code == 0);
  const auto generated =
      run_actord(command("generate", topology, {"--prompt", "Once upon a time", "--prompt", "One day", "--prompt",
                                                "The dog", "--max-tokens", "40", "--ignore-eos", "--trace", trace}));
  REQUIRE(generated.exit_code == 0);
  const auto traced = run_actord(command("calibrate", topology, {"--from-trace", trace, "-o", profile}));
  INFO(traced.err);
  REQUIRE(traced.exit_code == 0);
  CHECK_THAT(traced.out, Catch::Contains("sizes the trace lacks from the profile's entry"));
  std::ifstream in(profile);
  const auto p = nlohmann::json::parse(in);
  REQUIRE(p.at("replicas").size() == 1);  // the same shape's entry, replaced
  CHECK(p["replicas"][0]["cost"]["steps"].get<int>() >= 39);  // the run's steps (the first one skipped)
  CHECK(p["replicas"][0]["cost"]["knots"].size() > 3);        // sizes up to the grid's, not only the run's

  const std::string bad = (tmp.path() / "bad.json").string();
  std::ofstream(bad) << "{\"no\": 1}";
  check_refused(run_actord(command("calibrate", topology, {"--from-trace", bad, "-o", profile})),
                bad + ": not a Chrome trace (no traceEvents list)");
  // A trace of another topology has no steps of this one's groups.
  check_refused(run_actord({"calibrate", "configs/pd.yaml", "--set", "groups[1].placement=thread", "--from-trace",
                            trace, "-o", profile}),
                "--from-trace: " + trace + " has no steps of the groups 'prefill'");

  // Groups of different shapes: each priced from its own groups' steps, on top of the grid's entries (a prefill
  // replica runs a step or two for a batch of prompts: too few to fit alone).
  const std::string pd_trace = (tmp.path() / "pd.json").string();
  const std::string pd_profile = (tmp.path() / "pd-profile.json").string();
  const std::vector<std::string> pd = {"configs/pd.yaml", "--set", "groups[1].placement=thread"};
  std::vector<std::string> prompts;
  for (int i = 0; i < 6; ++i) prompts.insert(prompts.end(), {"--prompt", "Once upon a time " + std::to_string(i)});
  prompts.insert(prompts.end(), {"--max-tokens", "24", "--ignore-eos", "--trace", pd_trace});
  REQUIRE(run_actord(command("generate", pd, prompts)).exit_code == 0);
  REQUIRE(run_actord(command("calibrate", pd, {"-o", pd_profile, "--max-batch", "4"})).exit_code == 0);
  const auto both = run_actord(command("calibrate", pd, {"--from-trace", pd_trace, "-o", pd_profile}));
  INFO(both.err);
  REQUIRE(both.exit_code == 0);
  std::ifstream pd_in(pd_profile);
  const auto two = nlohmann::json::parse(pd_in);
  REQUIRE(two.at("replicas").size() == 2);
  CHECK(two["replicas"][0]["shape"]["placement"] == "process");
  CHECK(two["replicas"][1]["shape"]["placement"] == "thread");
  CHECK(two.contains("handoff"));
}

