// The topology file: defaults, validation with paths, overrides.
#include <catch2/catch.hpp>
#include <filesystem>

#include "core/topology_config.hpp"

using namespace actord;

namespace {

const char* kMinimal = R"(
model: {path: ../models/stories260K}
groups:
  - {name: main, device: cpu}
)";

std::string error_of(const std::string& yaml, const TopologyOverrides& o = {}) {
  auto r = parse_topology(yaml, "configs/t.yaml", o);
  REQUIRE_FALSE(r.ok());
  return r.error().message;
}

}  // namespace

TEST_CASE("the bundled topologies load and differ only in placement", "[config]") {
  const std::filesystem::path root = ACTORD_SOURCE_DIR;
  auto one = load_topology(root / "configs/quickstart.yaml");
  auto two = load_topology(root / "configs/quickstart-2proc.yaml");
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  CHECK(one->groups.at(0).placement == Placement::thread);
  CHECK(two->groups.at(0).placement == Placement::process);
  CHECK(std::filesystem::equivalent(one->model.path, root / "models/stories260K"));
  CHECK(one->engine.kv_cache_memory == 64ull << 20);
}

TEST_CASE("defaults fill what the file leaves out - relative model paths follow the file", "[config]") {
  auto cfg = parse_topology(kMinimal, "/etc/actord/t.yaml");
  REQUIRE(cfg.ok());
  CHECK(cfg->model.path == std::filesystem::path("/etc/models/stories260K"));
  CHECK(cfg->engine.max_num_seqs == 64);
  CHECK(cfg->engine.block_size == 16);
  CHECK(cfg->engine.kv_cache_memory == 256ull << 20);
  CHECK(cfg->groups.at(0).placement == Placement::thread);
  CHECK(cfg->engine.rebuild_retry_max == std::chrono::seconds(30));
}

TEST_CASE("engine.rebuild_retry_max is a positive duration", "[config][failure]") {
  auto cfg = parse_topology(std::string(kMinimal) + "engine: {rebuild_retry_max: 1.5m}\n", "configs/t.yaml");
  REQUIRE(cfg.ok());
  CHECK(cfg->engine.rebuild_retry_max == std::chrono::seconds(90));
  CHECK(error_of(std::string(kMinimal) + "engine: {rebuild_retry_max: 0s}\n") ==
        "configs/t.yaml: engine.rebuild_retry_max: must be positive");
  CHECK_THAT(error_of(std::string(kMinimal) + "engine: {rebuild_retry_max: soon}\n"),
             Catch::StartsWith("configs/t.yaml: engine.rebuild_retry_max: "));
}

TEST_CASE("unknown keys are reported with their path", "[config]") {
  CHECK(error_of(std::string(kMinimal) + "engine: {max_num_seq: 3}\n") ==
        "configs/t.yaml: engine.max_num_seq: unknown key (known keys: block_size, cpu_binding, enable_prefix_caching, "
        "kv_cache_dtype, kv_cache_memory, max_model_len, max_num_batched_tokens, max_num_seqs, preemption_mode, "
        "rebuild_retry_max, reshape_kv, step_timeout, swap_space)");
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{name: a, colour: red}]\n"),
             Catch::StartsWith("configs/t.yaml: groups[0].colour: unknown key"));
  CHECK_THAT(error_of("modle: {path: m}\n"), Catch::StartsWith("configs/t.yaml: modle: unknown key"));
}

TEST_CASE("malformed YAML and bad values give one clear error", "[config]") {
  CHECK_THAT(error_of("model: {path: [unclosed\n"), Catch::StartsWith("configs/t.yaml: malformed YAML"));
  CHECK(error_of("") == "configs/t.yaml: the file is empty");
  CHECK(error_of("- a\n- b\n") == "configs/t.yaml: the topology must be a YAML mapping");
  CHECK(error_of(std::string(kMinimal) + "engine: {block_size: 3}\n") ==
        "configs/t.yaml: engine.block_size: must be a power of two between 1 and 256, got 3");
  CHECK(error_of(std::string(kMinimal) + "engine: {max_num_seqs: lots}\n") ==
        "configs/t.yaml: engine.max_num_seqs: must be an integer, got 'lots'");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_dtype: int4}\n") ==
        "configs/t.yaml: engine.kv_cache_dtype: must be auto, float32, bfloat16, float16 or int8, got 'int4'");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 12 parsecs}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: unknown size unit 'parsecs' in '12 parsecs' (use KiB, MiB, GiB, TiB)");
  CHECK(error_of(std::string(kMinimal) + "server: {reasoning_parser: deepseek}\n") ==
        "configs/t.yaml: server.reasoning_parser: must be auto or none, got 'deepseek'");
  CHECK(error_of(std::string(kMinimal) + "server: {tool_call_parser: xml}\n") ==
        "configs/t.yaml: server.tool_call_parser: must be auto, hermes, mistral or llama3_json, got 'xml'");
  CHECK(error_of(std::string(kMinimal) + "engine: {swap_space: lots}\n") ==
        "configs/t.yaml: engine.swap_space: must be a size such as 256MiB or 1.5GiB, got 'lots'");
  // Sizes that do not fit 64 bits are refused, not wrapped; fractions are whole bytes.
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 99999999999999999GiB}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: '99999999999999999GiB' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 184467440737095516160}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: '184467440737095516160' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "server: {max_request_body: 99999999999999999999999}\n") ==
        "configs/t.yaml: server.max_request_body: '99999999999999999999999' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 1.GiB}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: must be a size such as 256MiB or 1.5GiB, got '1.GiB'");
  CHECK(parse_byte_size("1.5GiB").value() == 3ull << 29);
  CHECK(parse_byte_size("0.5 KiB").value() == 512);
  CHECK(parse_byte_size("2TiB").value() == 2ull << 40);
  CHECK(parse_byte_size("16EiB").error().message == "unknown size unit 'EiB' in '16EiB' (use KiB, MiB, GiB, TiB)");
  CHECK(parse_byte_size("16777215TiB").value() == 16777215ull << 40);
  CHECK(parse_byte_size("16777216TiB").error().message == "'16777216TiB' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "engine: {preemption_mode: evict}\n") ==
        "configs/t.yaml: engine.preemption_mode: must be recompute or swap, got 'evict'");
  CHECK(error_of("groups: [{name: a}]\n") == "configs/t.yaml: model.path: is required");
  CHECK(error_of("model: {path: m}\n") == "configs/t.yaml: groups: must be a non-empty list of groups");
  CHECK(error_of("model: {path: m}\ngroups: [{placement: moon}]\n") ==
        "configs/t.yaml: groups[0].placement: must be thread, process or node:<name>, got 'moon'");
  CHECK(error_of("model: {path: m}\ngroups: [{device: gpu}]\n") ==
        "configs/t.yaml: groups[0].device: unknown device 'gpu' (known: cpu, cuda)");
  CHECK(error_of("model: {path: m, dtype: int8}\ngroups: [{}]\n") ==
        "configs/t.yaml: model.dtype: must be auto, float32, bfloat16 or float16, got 'int8'");
  CHECK(error_of("model: {path: m, load_format: pickle}\ngroups: [{}]\n") ==
        "configs/t.yaml: model.load_format: must be auto or dummy, got 'pickle'");
  CHECK(error_of("model: {path: m, quantization: int3}\ngroups: [{}]\n") ==
        "configs/t.yaml: model.quantization: must be none, int8 or int4, got 'int3'");
  CHECK(error_of("model: {path: m, quantization: int4, quantization_group: 48}\ngroups: [{}]\n") ==
        "configs/t.yaml: model.quantization_group: quantization group must be 0 (per channel), 16, 32, 64, 128 or "
        "256, got 48");
  CHECK(error_of("model: {path: m, quantization: int8, quantization_zero_points: true}\ngroups: [{}]\n") ==
        "configs/t.yaml: model.quantization_zero_points: zero points are for int4 only (int8 is symmetric)");
  CHECK(error_of("model: {path: m}\ngroups: [{threads: -1}]\n") ==
        "configs/t.yaml: groups[0].threads: must be 0 (auto) to 1024, got -1");
}

TEST_CASE("set overrides any key by its path and is validated like the file", "[config]") {
  TopologyOverrides o;
  o.set = {"engine.max_num_seqs=8", "groups[0].placement=process", "server.port=9001", "engine.kv_cache_memory=1GiB"};
  auto cfg = parse_topology(kMinimal, "t.yaml", o);
  REQUIRE(cfg.ok());
  CHECK(cfg->engine.max_num_seqs == 8);
  CHECK(cfg->groups[0].placement == Placement::process);
  CHECK(cfg->server.port == 9001);
  CHECK(cfg->engine.kv_cache_memory == 1ull << 30);

  // An index too large for any list is no element, not an abort.
  o.set = {"groups[99999999999999999999].tp=2"};
  CHECK(parse_topology(kMinimal, "t.yaml", o).error().message ==
        "t.yaml: groups[99999999999999999999].tp: --set: no element 99999999999999999999 here");
  o.set = {"groups[0]=99999999999999999999999"};
  CHECK_THAT(parse_topology(kMinimal, "t.yaml", o).error().message, Catch::StartsWith("t.yaml: groups"));
  o.set = {"groups.0.name=other"};
  REQUIRE(parse_topology(kMinimal, "t.yaml", o)->groups[0].name == "other");

  o.set = {"engine.max_num_seqs=0"};
  CHECK(error_of(kMinimal, o) == "configs/t.yaml: engine.max_num_seqs: must be at least 1, got 0");
  o.set = {"engine.bogus=1"};
  CHECK_THAT(error_of(kMinimal, o), Catch::StartsWith("configs/t.yaml: engine.bogus: unknown key"));
  o.set = {"groups[3].tp=1"};
  CHECK(error_of(kMinimal, o) == "configs/t.yaml: groups[3].tp: --set: no element 3 here");
  o.set = {"no_equals_sign"};
  CHECK(error_of(kMinimal, o) == "configs/t.yaml: --set no_equals_sign: expected dotted.key=value");
}

TEST_CASE("the model override replaces the model path - relative to the working directory", "[config]") {
  TopologyOverrides o;
  o.model = "some/dir";
  auto cfg = parse_topology(kMinimal, "/x/t.yaml", o);
  REQUIRE(cfg.ok());
  CHECK(cfg->model.path == std::filesystem::path("some/dir"));
}

TEST_CASE("groups[].link: a latency and a bandwidth for a modelled link - bad ones name the key", "[config][link_model]") {
  auto t = parse_topology("model: {path: m}\ngroups: [{tp: 2, link: {latency: 200us, bandwidth: 2GB/s}}]\n",
                          "configs/t.yaml");
  REQUIRE(t.ok());
  CHECK(t->groups[0].link.latency == std::chrono::microseconds(200));
  CHECK(t->groups[0].link.bytes_per_second == 2000000000u);
  CHECK(t->groups[0].link.active());
  CHECK_FALSE(parse_topology("model: {path: m}\ngroups: [{tp: 2}]\n", "configs/t.yaml")->groups[0].link.active());
  CHECK(*parse_fine_duration("1.5ms") == std::chrono::microseconds(1500));
  CHECK(*parse_fine_duration("100ns") == std::chrono::nanoseconds(100));
  // The coarse parser keeps its own units (no ns: the numbers fuzzer's reference) and rounds up to milliseconds.
  CHECK_FALSE(parse_duration("100ns").ok());
  CHECK(*parse_duration("100us") == std::chrono::milliseconds(1));
  CHECK(*parse_byte_rate("500MiB/s") == 500ull << 20);
  CHECK(error_of("model: {path: m}\ngroups: [{link: {latency: soon}}]\n") ==
        "configs/t.yaml: groups[0].link.latency: must be a duration such as 2s, 500ms or 200us, got 'soon'");
  CHECK(error_of("model: {path: m}\ngroups: [{link: {bandwidth: 10GB}}]\n") ==
        "configs/t.yaml: groups[0].link.bandwidth: must be a rate such as 10GB/s or 500MiB/s, got '10GB'");
  CHECK(error_of("model: {path: m}\ngroups: [{link: {bandwidth: 0GB/s}}]\n") ==
        "configs/t.yaml: groups[0].link.bandwidth: must be a positive rate, got '0GB/s'");
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{link: {jitter: 1ms}}]\n"),
             Catch::EndsWith("groups[0].link.jitter: unknown key (known keys: bandwidth, latency)"));
}

TEST_CASE("groups[].tbo: true - false - auto (chosen step by step) - anything else names the key", "[config][tbo]") {
  auto t = parse_topology("model: {path: m}\ngroups: [{tp: 2, tbo: auto, micro_batches: 3}]\n", "configs/t.yaml");
  REQUIRE(t.ok());
  CHECK(t->groups[0].tbo);
  CHECK(t->groups[0].tbo_auto);
  CHECK(t->groups[0].micro_batches == 3);
  t = parse_topology("model: {path: m}\ngroups: [{tp: 2, tbo: true}]\n", "configs/t.yaml");
  REQUIRE(t.ok());
  CHECK(t->groups[0].tbo);
  CHECK_FALSE(t->groups[0].tbo_auto);
  CHECK(error_of("model: {path: m}\ngroups: [{tbo: sometimes}]\n") ==
        "configs/t.yaml: groups[0].tbo: must be true, false or auto, got 'sometimes'");
  CHECK(error_of("model: {path: m}\ngroups: [{tbo: [auto]}]\n") == "configs/t.yaml: groups[0].tbo: must be a scalar");
}

TEST_CASE("byte sizes", "[config]") {
  CHECK(*parse_byte_size("64MiB") == 64ull << 20);
  CHECK(*parse_byte_size("2 GiB") == 2ull << 30);
  CHECK(*parse_byte_size("1000") == 1000);
  CHECK(*parse_byte_size("5MB") == 5000000);
  CHECK_FALSE(parse_byte_size("MiB").ok());
}

TEST_CASE("bundled parallel topologies parse - what the engine cannot run yet is no parse error", "[config]") {
  const std::filesystem::path root = ACTORD_SOURCE_DIR;
  struct Expected {
    const char* file;
    int replicas, tp, pp;
  };
  for (const Expected& e : {Expected{"tp2.yaml", 1, 2, 1}, Expected{"pp2.yaml", 1, 1, 2},
                            Expected{"tp2-pp2.yaml", 1, 2, 2}, Expected{"dp2.yaml", 2, 1, 1},
                            Expected{"dp2-tp2.yaml", 2, 2, 1}, Expected{"two-node.yaml", 1, 2, 2}}) {
    INFO(e.file);
    auto cfg = load_topology(root / "configs" / e.file);
    REQUIRE(cfg.ok());
    REQUIRE(cfg->groups.size() == 1);
    CHECK(cfg->groups[0].replicas == e.replicas);
    CHECK(cfg->groups[0].tp == e.tp);
    CHECK(cfg->groups[0].pp == e.pp);
    CHECK(std::filesystem::equivalent(cfg->model.path, root / "models/stories260K"));
  }
  auto two = load_topology(root / "configs/two-node.yaml");
  REQUIRE(two.ok());
  REQUIRE(two->nodes.size() == 1);
  CHECK(two->nodes[0].name == "node-b");
  CHECK(two->groups[0].placement == Placement::node);
  CHECK(two->groups[0].placement_nodes == std::vector<std::string>{"local", "node-b"});

  // tp 3 on an 8-head model parses: the heads are checked by the plan, once the model is known.
  auto tp3 = parse_topology("model: {path: m}\ngroups: [{tp: 3, replicas: 4, pp: 2}]\n", "t.yaml");
  REQUIRE(tp3.ok());
  CHECK(tp3->groups[0].tp == 3);
  auto groups = parse_topology("model: {path: m}\ngroups: [{name: a}, {name: b}]\n", "t.yaml");
  REQUIRE(groups.ok());
  CHECK(groups->groups.size() == 2);
}

TEST_CASE("groups: replicas, tp, pp, names, oversubscribe", "[config]") {
  auto cfg = parse_topology(kMinimal, "t.yaml");
  REQUIRE(cfg.ok());
  CHECK(cfg->groups[0].replicas == 1);
  CHECK(cfg->groups[0].tp == 1);
  CHECK(cfg->groups[0].pp == 1);
  CHECK(cfg->groups[0].threads == 0);
  CHECK_FALSE(cfg->groups[0].oversubscribe);
  CHECK(cfg->groups[0].placement_nodes.empty());
  CHECK(cfg->nodes.empty());
  auto over = parse_topology("model: {path: m}\ngroups: [{oversubscribe: true}]\n", "t.yaml");
  REQUIRE(over.ok());
  CHECK(over->groups[0].oversubscribe);

  CHECK(error_of("model: {path: m}\ngroups: [{replicas: -1}]\n") ==
        "configs/t.yaml: groups[0].replicas: must be at least 1, got -1");
  CHECK(error_of("model: {path: m}\ngroups: [{tp: 0}]\n") == "configs/t.yaml: groups[0].tp: must be at least 1, got 0");
  CHECK(error_of("model: {path: m}\ngroups: [{pp: 4097}]\n") ==
        "configs/t.yaml: groups[0].pp: must be at most 4096, got 4097");
  CHECK(error_of("model: {path: m}\ngroups: [{tp: two}]\n") ==
        "configs/t.yaml: groups[0].tp: must be an integer, got 'two'");
  CHECK(error_of("model: {path: m}\ngroups: [{replicas: 4096, tp: 16, pp: 2}]\n") ==
        "configs/t.yaml: groups[0]: the groups so far have 131072 ranks (replicas x tp x pp), more than 65536");
  CHECK(error_of("model: {path: m}\ngroups: [{oversubscribe: maybe}]\n") ==
        "configs/t.yaml: groups[0].oversubscribe: must be true or false, got 'maybe'");
  CHECK(error_of("model: {path: m}\ngroups: [{name: a}, {name: a}]\n") ==
        "configs/t.yaml: groups[1].name: 'a' is also the name of groups[0]");
  CHECK(error_of("model: {path: m}\ngroups: [{name: 'a/b'}]\n") ==
        "configs/t.yaml: groups[0].name: must be letters, digits, '_', '.' or '-', got 'a/b'");
  CHECK(error_of("model: {path: m}\ngroups: [{router: random}]\n") ==
        "configs/t.yaml: groups[0].router: must be round_robin, least_tokens or prefix_affinity, got 'random'");
  CHECK(error_of("model: {path: m}\ngroups: [{device: tpu}]\n") ==
        "configs/t.yaml: groups[0].device: unknown device 'tpu' (known: cpu, cuda)");
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{shards: {}}]\n"),
             Catch::StartsWith("configs/t.yaml: groups[0].shards: unknown key (known keys: afd, autoscale, cpu_isa, device, ep, eplb_step_interval, link, micro_batches, name, num_redundant_experts, "
                               "oversubscribe, placement, pp, replicas, role, router, tbo, threads, tp)"));
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{afd: {}}]\n"),
             Catch::EndsWith("groups[0].afd.attention: must be a mapping with workers (and tp)"));
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{afd: 3}]\n"),
             Catch::EndsWith("groups[0].afd: must be a mapping with attention and ffn"));
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{afd: {attention: {workers: 1}}}]\n"),
             Catch::EndsWith("groups[0].afd.ffn: must be a mapping with workers"));
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{afd: {attention: {workers: 1}, ffn: {workers: x}}}]\n"),
             Catch::Contains("groups[0].afd.ffn.workers: must be"));
}

TEST_CASE("groups[].router: one policy per phase - a prefill and a decode group may differ, groups sharing a phase "
          "may not", "[config][router]") {
  auto pd = parse_topology("model: {path: m}\ngroups: [{name: p, role: prefill, router: prefix_affinity}, "
                           "{name: d, role: decode, router: round_robin}]\n",
                           "t.yaml");
  REQUIRE(pd.ok());
  CHECK(phase_policies(*pd) == PhasePolicies{RoutePolicy::prefix_affinity, RoutePolicy::round_robin});
  auto one = parse_topology("model: {path: m}\ngroups: [{router: round_robin}]\n", "t.yaml");
  REQUIRE(one.ok());
  CHECK(phase_policies(*one) == PhasePolicies{RoutePolicy::round_robin, RoutePolicy::round_robin});
  // Two prefill groups beside a group of role both: the prefill phase is theirs and its.
  CHECK(error_of("model: {path: m}\ngroups: [{name: a, router: least_tokens}, {name: b, role: prefill, router: "
                 "prefix_affinity}]\n") ==
        "configs/t.yaml: groups[1].router: must be groups[0]'s (least_tokens): both serve requests in their prefill "
        "phase, which the router routes by one policy, got 'prefix_affinity'");
  CHECK(error_of("model: {path: m}\ngroups: [{name: a, role: prefill}, {name: b, role: decode}, {name: c, role: "
                 "decode, router: round_robin}]\n") ==
        "configs/t.yaml: groups[2].router: must be groups[1]'s (least_tokens): both serve requests in their decode "
        "phase, which the router routes by one policy, got 'round_robin'");
}

TEST_CASE("nodes and placement on nodes: names, addresses, unknown nodes, spreading", "[config]") {
  const std::string nodes =
      "nodes:\n  - {name: b, address: 'tcp://10.0.0.2:7000'}\n  - {name: c, address: 'tcp://[::1]:7001'}\n";
  auto cfg = parse_topology("model: {path: m}\n" + nodes +
                                "groups: [{replicas: 2, pp: 2, placement: [node:local, node:b, 'node:c']}]\n",
                            "t.yaml");
  REQUIRE(cfg.ok());
  REQUIRE(cfg->nodes.size() == 2);
  CHECK(cfg->nodes[1].name == "c");
  CHECK(cfg->nodes[1].address == "tcp://[::1]:7001");
  CHECK(cfg->groups[0].placement == Placement::node);
  CHECK(cfg->groups[0].placement_nodes == std::vector<std::string>{"local", "b", "c"});
  auto one = parse_topology("model: {path: m}\n" + nodes + "groups: [{placement: 'node:b'}]\n", "t.yaml");
  REQUIRE(one.ok());
  CHECK(one->groups[0].placement_nodes == std::vector<std::string>{"b"});
  auto local = parse_topology("model: {path: m}\ngroups: [{placement: 'node:local'}]\n", "t.yaml");
  REQUIRE(local.ok());
  CHECK(local->groups[0].placement == Placement::node);
  // --set reaches placement and the nodes like any key.
  TopologyOverrides o;
  o.set = {"groups[0].placement=node:c", "nodes[0].address=tcp://b.example:7000"};
  auto set = parse_topology("model: {path: m}\n" + nodes + "groups: [{}]\n", "t.yaml", o);
  REQUIRE(set.ok());
  CHECK(set->groups[0].placement_nodes == std::vector<std::string>{"c"});
  CHECK(set->nodes[0].address == "tcp://b.example:7000");

  auto err = [&](const std::string& yaml) { return error_of("model: {path: m}\n" + yaml); };
  CHECK(err(nodes + "groups: [{placement: 'node:z'}]\n") ==
        "configs/t.yaml: groups[0].placement: unknown node 'z' (known nodes: local, b, c)");
  CHECK(err("groups: [{placement: 'node:b'}]\n") ==
        "configs/t.yaml: groups[0].placement: unknown node 'b' (known nodes: local)");
  CHECK(err("groups: [{placement: 'node:'}]\n") ==
        "configs/t.yaml: groups[0].placement: node: needs a node's name (node:local or one of nodes[])");
  CHECK(err(nodes + "groups: [{pp: 2, placement: [node:b, node:y]}]\n") ==
        "configs/t.yaml: groups[0].placement[1]: unknown node 'y' (known nodes: local, b, c)");
  CHECK(err(nodes + "groups: [{pp: 2, placement: [node:b, process]}]\n") ==
        "configs/t.yaml: groups[0].placement[1]: a list names nodes (node:<name>; node:local for a process on this "
        "machine), got 'process'");
  CHECK(err(nodes + "groups: [{pp: 2, placement: [node:b, node:b]}]\n") ==
        "configs/t.yaml: groups[0].placement[1]: node 'b' is listed twice");
  CHECK(err(nodes + "groups: [{pp: 2, placement: [node:b, node:c, node:local]}]\n") ==
        "configs/t.yaml: groups[0].placement: lists 3 nodes, but the group has only 2 replica stages (replicas x pp) "
        "to spread over them");
  // An autoscaled group spreads its max_replicas: one replica to start with, over two nodes.
  CHECK(parse_topology("model: {path: m}\n" + nodes + "groups: [{placement: [node:local, node:b], autoscale: "
                       "{max_replicas: 2}}]\n", "t.yaml").ok());
  CHECK(err(nodes + "groups: [{placement: [node:local, node:b, node:c], autoscale: {max_replicas: 2}}]\n") ==
        "configs/t.yaml: groups[0].placement: lists 3 nodes, but the group has only 2 replica stages (replicas x pp) "
        "to spread over them");
  CHECK(err("groups: [{placement: []}]\n") ==
        "configs/t.yaml: groups[0].placement: must be thread, process, node:<name> or a non-empty list of "
        "node:<name>");
  CHECK(err("nodes: [{name: local, address: 'tcp://h:1'}]\ngroups: [{}]\n") ==
        "configs/t.yaml: nodes[0].name: 'local' is this machine, always there: do not list it");
  CHECK(err("nodes: [{name: b, address: 'tcp://h:1'}, {name: b, address: 'tcp://h:2'}]\ngroups: [{}]\n") ==
        "configs/t.yaml: nodes[1].name: 'b' is also the name of nodes[0]");
  CHECK(err("nodes: [{name: b, address: 'tcp://h:1'}, {name: c, address: 'tcp://h:1'}]\ngroups: [{}]\n") ==
        "configs/t.yaml: nodes[1].address: 'tcp://h:1' is also the address of nodes[0]");
  CHECK(err("nodes: [{address: 'tcp://h:1'}]\ngroups: [{}]\n") == "configs/t.yaml: nodes[0].name: is required");
  CHECK(err("nodes: [{name: b}]\ngroups: [{}]\n") == "configs/t.yaml: nodes[0].address: is required");
  for (const char* bad :
       {"h:7000", "tcp://h", "tcp://:7000", "tcp://h:0", "tcp://h:65536", "tcp://h:x", "tcp://[::1:7"}) {
    INFO(bad);
    CHECK(err(std::string("nodes: [{name: b, address: '") + bad + "'}]\ngroups: [{}]\n") ==
          std::string("configs/t.yaml: nodes[0].address: must be tcp://HOST:PORT, got '") + bad + "'");
  }
  CHECK_THAT(err("nodes: [{name: b, address: 'tcp://h:1', cores: 8}]\ngroups: [{}]\n"),
             Catch::StartsWith("configs/t.yaml: nodes[0].cores: unknown key (known keys: address, name)"));
  CHECK(err("nodes: {b: 1}\ngroups: [{}]\n") == "configs/t.yaml: nodes: must be a list of {name, address}");
}

TEST_CASE("lora.modules keep the file's order - relative adapter paths follow the file - bad names and ranks are refused",
          "[config][lora]") {
  auto cfg = parse_topology(kMinimal + std::string("lora:\n  modules:\n    sql: adapters/sql\n    chat-v2: /srv/chat\n"
                                                   "  max_lora_rank: 16\n"),
                            "/etc/actord/t.yaml");
  REQUIRE(cfg.ok());
  REQUIRE(cfg->lora.modules.size() == 2);
  CHECK(cfg->lora.modules[0] == LoraModule{"sql", "/etc/actord/adapters/sql"});
  CHECK(cfg->lora.modules[1] == LoraModule{"chat-v2", "/srv/chat"});
  CHECK(cfg->lora.max_lora_rank == 16);
  auto defaults = parse_topology(kMinimal, "/etc/actord/t.yaml");
  REQUIRE(defaults.ok());
  CHECK(defaults->lora.modules.empty());
  CHECK(defaults->lora.max_lora_rank == 64);
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"lora: {modules: [a, b]}\n", "lora.modules"},
           {"lora: {modules: {'a b': /x}}\n", "lora.modules.a b"},
           {"lora: {modules: {a: ''}}\n", "lora.modules.a"},
           {"lora: {max_lora_rank: 0}\n", "lora.max_lora_rank"},
           {"lora: {adapters: {}}\n", "lora.adapters"}}) {
    auto bad = parse_topology(kMinimal + yaml, "/etc/actord/t.yaml");
    REQUIRE_FALSE(bad.ok());
    INFO(bad.error().message);
    CHECK(bad.error().message.find(key) != std::string::npos);
  }
}

TEST_CASE("groups[].autoscale: bounds, target and windows - a group without replicas starts at min_replicas - bad "
          "ones name the key", "[config][autoscale]") {
  auto cfg = parse_topology("model: {path: m}\ngroups: [{autoscale: {min_replicas: 2, max_replicas: 4, "
                            "target_sequences: 8, target_prompt_tokens: 4096, scale_up_after: 1s, scale_down_after: 30s, "
                            "interval: 200ms}}]\n",
                            "t.yaml");
  REQUIRE(cfg.ok());
  const AutoscaleSection& a = cfg->groups[0].autoscale;
  CHECK(a.active());
  CHECK(a.min_replicas == 2);
  CHECK(a.max_replicas == 4);
  CHECK(a.target_sequences == 8);
  CHECK(a.target_prompt_tokens == 4096);
  CHECK(a.scale_up_after == std::chrono::seconds(1));
  CHECK(a.scale_down_after == std::chrono::seconds(30));
  CHECK(a.interval == std::chrono::milliseconds(200));
  CHECK(cfg->groups[0].replicas == 2);
  auto defaults = parse_topology("model: {path: m}\ngroups: [{replicas: 3, autoscale: {max_replicas: 3}}]\n", "t.yaml");
  REQUIRE(defaults.ok());
  CHECK(defaults->groups[0].autoscale.min_replicas == 1);
  CHECK(defaults->groups[0].autoscale.scale_up_after == std::chrono::seconds(5));
  CHECK(defaults->groups[0].replicas == 3);
  CHECK(defaults->groups[0].autoscale.target_prompt_tokens == 0);
  CHECK_FALSE(parse_topology(kMinimal, "t.yaml")->groups[0].autoscale.active());

  CHECK(error_of("model: {path: m}\ngroups: [{autoscale: {min_replicas: 2}}]\n") ==
        "configs/t.yaml: groups[0].autoscale.max_replicas: must be set: the most replicas the group may grow to");
  CHECK(error_of("model: {path: m}\ngroups: [{autoscale: {min_replicas: 3, max_replicas: 2}}]\n") ==
        "configs/t.yaml: groups[0].autoscale.max_replicas: must be at least min_replicas (3), got 2");
  CHECK(error_of("model: {path: m}\ngroups: [{autoscale: {min_replicas: 0, max_replicas: 2}}]\n") ==
        "configs/t.yaml: groups[0].autoscale.min_replicas: must be at least 1, got 0");
  CHECK(error_of("model: {path: m}\ngroups: [{replicas: 5, autoscale: {max_replicas: 4}}]\n") ==
        "configs/t.yaml: groups[0].replicas: must be within autoscale's min_replicas and max_replicas (1 to 4), got 5");
  CHECK(error_of("model: {path: m}\ngroups: [{autoscale: {max_replicas: 2, interval: 1ms}}]\n") ==
        "configs/t.yaml: groups[0].autoscale.interval: must be at least 10ms, got 1ms");
  CHECK(error_of("model: {path: m}\ngroups: [{autoscale: {max_replicas: 2, scale_up_after: soon}}]\n") ==
        "configs/t.yaml: groups[0].autoscale.scale_up_after: " + parse_duration("soon").error().message);
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{autoscale: {max_replicas: 2, target: 3}}]\n"),
             Catch::StartsWith("configs/t.yaml: groups[0].autoscale.target: unknown key"));
  CHECK(error_of("model: {path: m}\ngroups: [{autoscale: {max_replicas: 2, target_prompt_tokens: -5}}]\n") ==
        "configs/t.yaml: groups[0].autoscale.target_prompt_tokens: must be at least 1 (or 0: the prefill backlog is not "
        "a signal), got -5");
  CHECK(error_of("model: {path: m}\ngroups: [{autoscale: 3}]\n") == "configs/t.yaml: groups[0].autoscale: must be a mapping");
}
