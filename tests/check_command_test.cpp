// `actord check CONFIG`: the bundled topologies pass and print their plan (a table, or JSON), bad ones exit 2 with
// one line naming the key; the engine refuses what it cannot run yet, naming the key, while check plans it.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/host_cpus.hpp"
#include "executors/cuda/cuda_backend.hpp"
#include "cli_util.hpp"

using namespace actord;

namespace {

using Run = test::RunResult;

// Runs actord with args from the repo root; killed if it has not ended within 120 s.
Run run_actord(const std::vector<std::string>& args) { return test::run_actord(args, std::chrono::seconds(120)); }

void check_refused(const Run& r, const std::string& message) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 2);
  CHECK(r.err == "error: " + message + "\n");
  CHECK(r.out.empty());
}

const char* const kExamples[] = {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml", "configs/tp2.yaml",
                                 "configs/pp2.yaml",        "configs/tp2-pp2.yaml",          "configs/dp2.yaml",
                                 "configs/dp2-tp2.yaml",    "configs/two-node.yaml"};

}  // namespace

TEST_CASE("check passes every bundled topology and prints its plan as a table", "[cli][check]") {
  for (const char* config : kExamples) {
    INFO(config);
    const Run r = run_actord({"check", config});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.empty());
    CHECK_THAT(r.out, Catch::StartsWith(std::string(config) + ": valid (nothing started)\n"));
    CHECK_THAT(r.out, Catch::Contains("LlamaForCausalLM, 5 layers, 8 heads, 4 KV heads, hidden 64"));
    CHECK_THAT(r.out, Catch::Contains("rank  ") && Catch::Contains("layers  heads  kv heads  vocab"));
    CHECK_THAT(r.out, Catch::Contains("main/replica/0/worker/tp0.pp0"));
  }
  const Run tp2pp2 = run_actord({"check", "configs/tp2-pp2.yaml"});
  CHECK_THAT(tp2pp2.out,
             Catch::Contains("group main: 1 replica x tp 2 x pp 2 = 4 ranks, device cpu, placement thread"));
  // tp1.pp1: layers 3-4, query heads 4-7, KV heads 2-3, vocabulary rows 256-511 (lm_head of the last stage).
  CHECK_THAT(tp2pp2.out, Catch::Contains("main/replica/0/worker/tp1.pp1  local  engine   1        3-4     4-7    2-3"
                                         "       256-511"));
  const Run pd = run_actord({"check", "configs/pd.yaml"});
  REQUIRE(pd.exit_code == 0);
  CHECK_THAT(pd.out, Catch::Contains("group prefill (prefill: hands each prefilled sequence with its KV to a decode "
                                     "group): 1 replica x tp 1 x pp 1 = 1 rank"));
  CHECK_THAT(pd.out, Catch::Contains("group decode (decode: takes the sequences prefilled elsewhere)"));
  CHECK_THAT(pd.out, Catch::Contains("decode/replica/0/worker/tp0.pp0"));
  // An autoscaled group is planned at its max_replicas as well.
  const Run ceiling = run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].threads=1", "--set",
                                  "groups[0].autoscale={max_replicas: 64}"});
  CHECK(ceiling.exit_code == 2);
  CHECK_THAT(ceiling.err, Catch::Contains("configs/quickstart.yaml: groups[0].autoscale.max_replicas: at 64 replicas, "
                                          "groups[0].threads: "));
  const Run routers = run_actord({"check", "configs/pd.yaml", "--set", "groups[0].router=prefix_affinity"});
  CHECK_THAT(routers.out, Catch::Contains("device cpu, placement process, routed by prefix_affinity\n"));
  CHECK_THAT(routers.out, Catch::Contains("device cpu, placement process, routed by least_tokens\n"));
  const Run two = run_actord({"check", "configs/two-node.yaml"});
  CHECK_THAT(two.out, Catch::Contains("placement node:local, node:node-b"));
  const Run drafts = run_actord({"check", "configs/quickstart.yaml", "--set", "speculative.method=ngram"});
  CHECK_THAT(drafts.out, Catch::Contains("decoding speculative by prompt lookup: up to 4 drafts from n-grams of 2-4 "
                                         "tokens, below 8 running sequences"));
  CHECK_THAT(two.out, Catch::Contains("node-b  tcp://10.77.0.2:7070  2      2"));
}

TEST_CASE("check --json is one object: ranks, layer ranges, shards, nodes, memory", "[cli][check]") {
  const Run r = run_actord({"check", "configs/dp2-tp2.yaml", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("valid") == true);
  CHECK(j.at("config") == "configs/dp2-tp2.yaml");
  CHECK(j.at("model").at("architecture") == "LlamaForCausalLM");
  CHECK(j.at("model").at("weight_bytes") == 1040128);  // plugins/model_footprint's estimate, f32
  CHECK(j.at("model").at("kv_bytes_per_token") == 1280);
  REQUIRE(j.at("groups").size() == 1);
  const auto& g = j.at("groups")[0];
  CHECK(g.at("replicas") == 2);
  CHECK(g.at("tp") == 2);
  CHECK(g.at("num_kv_blocks") == (64u << 20) / (640 * 16));
  const auto& ranks = g.at("ranks");
  REQUIRE(ranks.size() == 4);
  CHECK(ranks[3].at("name") == "main/replica/1/worker/tp1.pp0");
  CHECK(ranks[3].at("replica") == 1);
  CHECK(ranks[3].at("heads") == nlohmann::json{{"first", 4}, {"count", 4}});
  CHECK(ranks[3].at("kv_heads") == nlohmann::json{{"first", 2}, {"count", 2}});
  CHECK(ranks[3].at("vocab") == nlohmann::json{{"first", 256}, {"count", 256}});
  CHECK(ranks[3].at("layers") == nlohmann::json{{"first", 0}, {"count", 5}});
  CHECK(ranks[3].at("threads") == 1);
  CHECK(ranks[3].at("own_process") == false);
  CHECK(ranks[3].at("memory_bytes").get<uint64_t>() ==
        ranks[3].at("weight_bytes").get<uint64_t>() + ranks[3].at("kv_pool_bytes").get<uint64_t>());
  CHECK(j.at("machine").at("threads") == 4);
  REQUIRE(j.at("nodes").size() == 1);
  CHECK(j.at("nodes")[0].at("ranks") == 4);

  const auto pp = nlohmann::json::parse(run_actord({"check", "configs/pp2.yaml", "--json"}).out);
  const auto& stages = pp.at("groups")[0].at("ranks");
  CHECK(stages[0].at("layers") == nlohmann::json{{"first", 0}, {"count", 3}});
  CHECK(stages[1].at("layers") == nlohmann::json{{"first", 3}, {"count", 2}});
  CHECK(stages[1].at("lm_head") == true);
  CHECK(stages[1].at("own_process") == true);
}

TEST_CASE("check refuses bad topologies with one line naming the key - exit 2", "[cli][check]") {
  check_refused(run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].tp=3"}),
                "configs/quickstart.yaml: groups[0].tp: must divide num_attention_heads (8), got 3");
  check_refused(run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].pp=6"}),
                "configs/quickstart.yaml: groups[0].pp: must be at most num_hidden_layers (5), got 6");
  check_refused(run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].replicas=-1"}),
                "configs/quickstart.yaml: groups[0].replicas: must be at least 1, got -1");
  check_refused(run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].placement=node:gpu7"}),
                "configs/quickstart.yaml: groups[0].placement: unknown node 'gpu7' (known nodes: local)");
  check_refused(run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].device=tpu"}),
                "configs/quickstart.yaml: groups[0].device: unknown device 'tpu' (known: cpu, cuda)");
  const std::string cores = std::to_string(usable_cpu_cores());
  check_refused(run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].threads=1024"}),
                "configs/quickstart.yaml: groups[0].threads: 1 rank at once x 1024 threads on this machine need 1024 cores, "
                "it has " + cores + "; lower threads, tp, pp or replicas, place ranks on other nodes, or set "
                "groups[0].oversubscribe: true");
  check_refused(run_actord({"check", "configs/quickstart.yaml", "--set", "speculative.method=medusa"}),
                "configs/quickstart.yaml: speculative.method: must be none or ngram (prompt lookup; no draft model is "
                "supported yet), got 'medusa'");
  check_refused(run_actord({"check", "configs/tp2.yaml", "--set", "engine.kv_cache_memory=10000"}),
                "configs/tp2.yaml: engine.kv_cache_memory: 10000 bytes hold no KV block (one block takes 10240 bytes)");

  test::TempDir tmp;
  const auto unknown = tmp.path() / "unknown.yaml";
  test::write_file(unknown, "model: {path: m}\nnodes: [{name: b, adress: 'tcp://b:1'}]\ngroups: [{}]\n");
  check_refused(run_actord({"check", unknown.string()}),
                unknown.string() + ": nodes[0].adress: unknown key (known keys: address, name)");
  const Run missing = run_actord({"check", "configs/quickstart.yaml", "--model", (tmp.path() / "nope").string()});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::StartsWith("error: ") && Catch::Contains("does not exist"));
  CHECK(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
}

TEST_CASE("the engine runs tp, pp and dp, and refuses what check plans but it cannot run yet, naming the key", "[cli][check]") {
  const std::vector<std::string> greedy = {"--prompt-ids", "1", "--max-tokens", "2", "--temperature", "0"};
  auto generate = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "generate");
    args.insert(args.end(), greedy.begin(), greedy.end());
    return run_actord(args);
  };
  // tp, pp, replicas, nodes and several groups run (the same greedy tokens as one worker); several groups on different
  // devices do not yet.
  const Run single = generate({"configs/quickstart.yaml"});
  REQUIRE(single.exit_code == 0);
  for (const char* file : {"configs/tp2.yaml", "configs/pp2.yaml", "configs/tp2-pp2.yaml", "configs/dp2.yaml",
                           "configs/dp2-tp2.yaml", "configs/pd.yaml"}) {
    const Run parallel = generate({file});
    CHECK(parallel.exit_code == 0);
    CHECK(parallel.out == single.out);
  }
  check_refused(generate({"configs/dp2.yaml", "--set", "groups[0].router=random"}),
                "configs/dp2.yaml: groups[0].router: must be round_robin, least_tokens or prefix_affinity, got 'random'");
  const Run on_local_node = generate({"configs/quickstart.yaml", "--set", "groups[0].placement=node:local"});
  CHECK(on_local_node.exit_code == 0);
  CHECK(on_local_node.out == single.out);
  test::TempDir tmp;
  const auto two_groups = tmp.path() / "two-groups.yaml";
  test::write_file(two_groups, "model: {path: " + test::stories_dir().string() + "}\ngroups: [{name: a}, {name: b}]\n");
  CHECK(run_actord({"check", two_groups.string()}).exit_code == 0);
  const Run two = generate({two_groups.string()});
  CHECK(two.exit_code == 0);
  CHECK(two.out == single.out);
  const auto mixed = tmp.path() / "mixed-devices.yaml";
  test::write_file(mixed, "model: {path: " + test::stories_dir().string() +
                              "}\ngroups: [{name: a}, {name: b, device: cuda}]\n");
  CHECK(run_actord({"check", mixed.string()}).exit_code == 0);
  check_refused(generate({mixed.string()}), mixed.string() +
                                                ": groups[1].device: the groups of one engine run on one kind of device "
                                                "so far (groups[0]: cpu, this one: cuda)");
  // An int8 KV cache runs in a worker of this process, in a worker process and over tp ranks; not on a cuda group.
  const Run int8_kv = generate({"configs/quickstart.yaml", "--set", "engine.kv_cache_dtype=int8"});
  REQUIRE(int8_kv.exit_code == 0);
  for (const char* file : {"configs/quickstart-2proc.yaml", "configs/tp2.yaml"}) {
    const Run other = generate({file, "--set", "engine.kv_cache_dtype=int8"});
    CHECK(other.exit_code == 0);
    CHECK(other.out == int8_kv.out);
  }
  check_refused(generate({"configs/quickstart.yaml", "--set", "groups[0].device=cuda", "--set",
                          "engine.kv_cache_dtype=int8"}),
                "configs/quickstart.yaml: engine.kv_cache_dtype: int8 runs on CPU ranks only so far (groups[0].device: "
                "cuda)");
  // A cuda group: refused before anything starts where this machine has no GPU (CI), or fewer GPUs than a replica's ranks.
  CHECK(run_actord({"check", "configs/quickstart.yaml", "--set", "groups[0].device=cuda"}).exit_code == 0);
  if (cuda::device_count() == 0) {
    check_refused(generate({"configs/quickstart.yaml", "--set", "groups[0].device=cuda"}),
                  "configs/quickstart.yaml: groups[0].device: cuda: " + cuda::unavailable_reason());
  }
  if (cuda::device_count() == 1) {
    check_refused(generate({"configs/tp2.yaml", "--set", "groups[0].device=cuda"}),
                  "configs/tp2.yaml: groups[0].device: cuda: tp x pp = 2 ranks need a GPU each, this machine has 1");
  }
  // A single rank with more threads than cores, unless oversubscribe allows it.
  check_refused(generate({"configs/quickstart.yaml", "--set", "groups[0].threads=1024"}),
                "configs/quickstart.yaml: groups[0].threads: 1 rank at once x 1024 threads on this machine need 1024 cores, "
                "it has " + std::to_string(usable_cpu_cores()) + "; lower threads, tp, pp or replicas, place ranks on "
                "other nodes, or set groups[0].oversubscribe: true");
}

TEST_CASE("check --help names its flags", "[cli][check]") {
  const Run r = run_actord({"check", "--help"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("--json") && Catch::Contains("--model") && Catch::Contains("--set") &&
                        Catch::Contains("starts nothing"));
  check_refused(run_actord({"check"}), "config is required (see --help)");
}
