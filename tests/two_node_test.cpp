// Two nodes on one machine: this test process (the engine's node, "local") and a network namespace of its own
// joined to it by a veth pair, where `actord agent` runs as node-b. Ranks placed on node-b are started there by the
// agent and reached over tcp, collective groups that cross the nodes run on the ZeroMQ backend; the greedy tokens
// equal one worker's (tp x pp, expert parallel lanes, attention-FFN disaggregation with the FFN pool on node-b, and
// a decode group on node-b taking the sequences a prefill group here prefilled).
// Nodes join and leave by actord apply, a replica moving to the joined node and back. A group placed over both
// scales, by actord scale or its autoscale, as its placement spreads the replicas.
// A killed node agent takes its ranks with it: the replica on node-b is lost, its streams go
// on in the local replica, every one equal to a clean run; the agent started again gets its replica back. Needs root and iproute2; skipped with a message
// otherwise. Everything it makes (namespace, veth, processes) is removed at the end.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include "engine_test_util.hpp"
#include "netns_util.hpp"
#include "process_util.hpp"

using namespace actord;

namespace {

// The `actord worker` processes whose parent is `agent`.
std::vector<pid_t> workers_of_agent(pid_t agent) {
  std::vector<pid_t> pids;
  test::for_each_process([&](pid_t pid, const std::filesystem::path& entry) {
    const auto args = test::process_args(entry);
    if (args.size() < 2 || args[1] != "worker") return;
    std::ifstream stat(entry / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == agent) pids.push_back(pid);
  });
  return pids;
}

// The other node: a network namespace with `actord agent` in it.
struct OtherNode : test::NetNamespace {
  pid_t agent = 0;

  std::string agent_address() const { return "tcp://" + there_ip + ":7070"; }
  void start_agent() {
    std::fflush(nullptr);  // the child must not write this process's buffered output again
    agent = fork();
    if (agent == 0) {
      const std::string binary = test::actord_binary().string(), listen = "--listen=" + agent_address();
      freopen("/dev/null", "w", stdout);
      freopen("/dev/null", "w", stderr);
      execlp("ip", "ip", "netns", "exec", ns.c_str(), binary.c_str(), "agent", listen.c_str(), nullptr);
      _exit(127);
    }
  }
  void kill_agent() {
    if (agent <= 0) return;
    kill(agent, SIGKILL);
    waitpid(agent, nullptr, 0);
    agent = 0;
  }
  ~OtherNode() { kill_agent(); }
};

// Declares `name`, an OtherNode with its agent started, or skips the test case with a message.
#define OTHER_NODE_OR_SKIP(name)                                                          \
  OtherNode name;                                                                         \
  if (!name.ok) {                                                                         \
    WARN("skipped: needs root and iproute2 to make a network namespace and a veth pair"); \
    return;                                                                               \
  }                                                                                       \
  name.start_agent()

// These tests' topology text: the model (stories260K unless given), a small KV pool, a 1 s step deadline and lost
// replicas retried at least every 2 s, `nodes` (a YAML list) and the groups `groups`.
std::string topology_text(const std::string& nodes, const std::string& groups, const std::string& model = "") {
  return "model: {path: " + (model.empty() ? test::stories_dir().string() : model) +
         "}\nengine: {kv_cache_memory: 64MiB, step_timeout: 1s, rebuild_retry_max: 2s}\nnodes: " + nodes +
         "\ngroups: [" + groups + "]\n";
}

// The nodes list naming `node` as node-b.
std::string node_b(const OtherNode& node) { return "[{name: node-b, address: " + node.agent_address() + "}]"; }

TopologyConfig two_nodes(const OtherNode& node, const std::string& group, const std::string& model = "") {
  test::TempDir tmp;
  test::write_file(tmp.path() / "t.yaml", topology_text(node_b(node), group, model));
  auto cfg = load_topology(tmp.path() / "t.yaml");
  REQUIRE(cfg.ok());
  return *cfg;
}

std::vector<GenerateRequest> greedy_batch(size_t n, uint32_t max_tokens) {
  std::vector<GenerateRequest> out;
  for (size_t i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt_ids = {1, static_cast<int32_t>(3 + (i * 53) % 500)};
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    out.push_back(std::move(r));
  }
  return out;
}

// The requests' outputs on one worker (quickstart), that engine stopped before the caller starts its own.
std::vector<GenerateOutput> one_worker(const std::vector<GenerateRequest>& requests) {
  auto single = test::start_engine(test::quickstart());
  auto out = single->generate(requests);
  REQUIRE(out.ok());
  return *out;
}

void check_same_tokens(const std::vector<GenerateOutput>& got, const std::vector<GenerateOutput>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i);
    REQUIRE_FALSE(got[i].error);
    CHECK(got[i].generated_ids == expected[i].generated_ids);
  }
}

}  // namespace

TEST_CASE("two nodes: tp2 x pp2 with stage 1 on node-b (its agent in a network namespace) equals one worker",
          "[engine][node]") {
  OTHER_NODE_OR_SKIP(node);
  const auto requests = greedy_batch(6, 64);
  const std::vector<GenerateOutput> expected = one_worker(requests);
  auto engine = test::start_engine(two_nodes(node, "{tp: 2, pp: 2, threads: 1, placement: [node:local, node:node-b]}"));
  CHECK(test::worker_processes_of(getpid()).size() == 2);  // stage 0 here; stage 1 is the agent's
  auto got = engine->generate(requests);
  REQUIRE(got.ok());
  check_same_tokens(*got, expected);
  engine.reset();
  CHECK(test::worker_processes_of(getpid()).empty());
}

// Each replica's node (its first rank's), by replica index.
std::vector<std::string> replica_nodes(Engine& engine) {
  auto fleet = engine.fleet();
  REQUIRE(fleet.ok());
  std::vector<std::string> out;
  for (const ReplicaInfo& r : fleet->replicas) {
    REQUIRE_FALSE(r.nodes.empty());
    out.push_back(r.nodes.front());
  }
  return out;
}

TEST_CASE("two nodes: actord scale of a group placed over this machine and node-b puts each added replica where the "
          "placement spreads them and retires those it no longer has room for - while requests stream, unchanged",
          "[engine][node][scale]") {
  OTHER_NODE_OR_SKIP(node);
  const auto requests = greedy_batch(8, 300);
  auto engine = test::start_engine(
      two_nodes(node, "{name: main, replicas: 2, threads: 1, placement: [node:local, node:node-b]}"));
  auto clean = engine->generate(requests);
  REQUIRE(clean.ok());
  CHECK(replica_nodes(*engine) == std::vector<std::string>{"", "node-b"});
  // replicas over [local, node-b], evenly and in order: 1 -> [local], 2 -> [local, b], 3 -> [local, local, b].
  const std::vector<std::pair<int, std::vector<std::string>>> scales = {
      {3, {"", "node-b", ""}},  // replica/2 here: the plan's second slot here
      {1, {""}},                // replica/0 keeps the one slot, the others retire
      {2, {"", "node-b"}},      // replica/3 on node-b
  };
  for (const auto& [replicas, nodes] : scales) {
    INFO("scale to " << replicas);
    Status scaled = make_error(Errc::internal, "not scaled");
    auto out = test::generate_while(*engine, requests, [&] { scaled = engine->scale("main", replicas); });
    INFO((scaled ? std::string() : scaled.error().message));
    REQUIRE(scaled.ok());
    REQUIRE(out.ok());
    check_same_tokens(*out, *clean);
    CHECK(test::eventually([&] { return replica_nodes(*engine) == nodes; }, std::chrono::seconds(10)));
  }
  // node-b runs replica/3 alone: replica/1's worker there ended when it retired.
  CHECK(test::eventually([&] { return workers_of_agent(node.agent).size() == 1; }, std::chrono::seconds(10)));
  // actord apply of a replicas-only change lays the group out the same way: replica/4 here.
  const std::string three =
      topology_text(node_b(node), "{name: main, replicas: 3, threads: 1, placement: [node:local, node:node-b]}");
  auto applied = engine->apply(three, test::source_dir() / "configs/applied.yaml");
  INFO((applied ? *applied : applied.error().message));
  REQUIRE(applied.ok());
  CHECK(replica_nodes(*engine) == std::vector<std::string>{"", "node-b", ""});
  engine.reset();
  CHECK(test::worker_processes_of(getpid()).empty());
}

TEST_CASE("two nodes: an autoscaled group placed over this machine and node-b grows onto node-b under load - every "
          "output equals one worker's", "[engine][node][autoscale]") {
  OTHER_NODE_OR_SKIP(node);
  const auto requests = greedy_batch(6, 400);
  const std::vector<GenerateOutput> expected = one_worker(requests);
  auto engine = test::start_engine(two_nodes(
      node, "{name: main, threads: 1, placement: [node:local, node:node-b], autoscale: {max_replicas: 2, "
            "target_sequences: 2, scale_up_after: 0s, scale_down_after: 60s, interval: 20ms}}"));
  CHECK(replica_nodes(*engine) == std::vector<std::string>{""});
  bool grew = false;
  auto got = test::generate_while(*engine, requests, [&] {
    grew = test::eventually([&] { return replica_nodes(*engine) == std::vector<std::string>{"", "node-b"}; },
                            std::chrono::seconds(20));
  });
  CHECK(grew);
  REQUIRE(got.ok());
  check_same_tokens(*got, expected);
  CHECK(workers_of_agent(node.agent).size() == 1);
  engine.reset();
  CHECK(test::worker_processes_of(getpid()).empty());
}

TEST_CASE("two nodes: a prefill group here and a decode group on node-b - each prefilled sequence goes on there with "
          "its KV and every output equals one worker's", "[engine][node][disaggregation]") {
  OTHER_NODE_OR_SKIP(node);
  const auto requests = greedy_batch(6, 48);
  const std::vector<GenerateOutput> expected = one_worker(requests);
  auto engine = test::start_engine(two_nodes(node, "{name: prefill, role: prefill, threads: 1, placement: process}, "
                                                   "{name: decode, role: decode, threads: 1, placement: [node:node-b]}"));
  CHECK(test::worker_processes_of(getpid()).size() == 1);  // the prefill worker; the decode one is the agent's
  CHECK(workers_of_agent(node.agent).size() == 1);
  auto got = engine->generate(requests);
  REQUIRE(got.ok());
  check_same_tokens(*got, expected);
  auto stats = engine->stats();
  REQUIRE(stats.ok());
  CHECK(stats->prefill_handoffs == requests.size());
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  REQUIRE(fleet->replicas.size() == 2);
  CHECK(fleet->replicas[1].group == "decode");
  CHECK(fleet->replicas[1].nodes == std::vector<std::string>{"node-b"});
  engine.reset();
  CHECK(test::worker_processes_of(getpid()).empty());
}

TEST_CASE("two nodes: a random Mixtral's experts over two attention lanes (ep2), lane 1 on node-b - the experts' "
          "tokens cross the nodes - equals one worker", "[engine][node][ep][lanes]") {
  OTHER_NODE_OR_SKIP(node);
  test::TempDir tmp;
  const auto dir = test::model_folder(tmp.path() / "mixtral", R"({"architectures": ["MixtralForCausalLM"],
      "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "intermediate_size": 256, "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
      "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32", "bos_token_id": 1,
      "eos_token_id": 2, "num_local_experts": 8, "num_experts_per_tok": 2})");
  const std::string model = dir.string() + ", load_format: dummy, seed: 5";
  const auto requests = greedy_batch(6, 64);
  auto single = test::start_engine(two_nodes(node, "{threads: 1}", model));
  auto expected = single->generate(requests);
  REQUIRE(expected.ok());
  single.reset();
  auto engine = test::start_engine(two_nodes(node, "{ep: 2, threads: 1, placement: [node:local, node:node-b]}", model));
  CHECK(test::worker_processes_of(getpid()).size() == 1);  // lane 0 here; lane 1 is the agent's
  auto got = engine->generate(requests);
  REQUIRE(got.ok());
  check_same_tokens(*got, *expected);
  auto stats = engine->stats();
  REQUIRE(stats.ok());
  uint64_t routed = 0;
  for (uint64_t t : stats->expert_tokens) routed += t;
  CHECK(routed == 2 * 2 * stats->tokens);  // every token fed, both lanes', in each of 2 layers to 2 experts
  engine.reset();
  CHECK(test::worker_processes_of(getpid()).empty());
}

TEST_CASE("two nodes: attention-FFN disaggregation with the attention here and the FFN pool on node-b - every "
          "layer's hidden states cross the nodes - equals one worker, with and without ping-pong",
          "[engine][node][afd]") {
  OTHER_NODE_OR_SKIP(node);
  const auto requests = greedy_batch(6, 64);
  auto single = test::start_engine(two_nodes(node, "{threads: 1}"));
  auto expected = single->generate(requests);
  REQUIRE(expected.ok());
  single.reset();
  for (const char* tbo : {"false", "true"}) {
    INFO("tbo " << tbo);
    auto engine = test::start_engine(two_nodes(
        node, std::string("{afd: {attention: {workers: 1}, ffn: {workers: 1}}, tbo: ") + tbo +
                  ", threads: 1, placement: [node:local, node:node-b]}"));
    CHECK(test::worker_processes_of(getpid()).size() == 1);  // the attention worker here; the FFN worker is the agent's
    auto got = engine->generate(requests);
    REQUIRE(got.ok());
    check_same_tokens(*got, *expected);
    engine.reset();
    CHECK(test::worker_processes_of(getpid()).empty());
  }
}

TEST_CASE("two nodes: a killed node agent - its replica is lost, its streams finish on the other, unchanged - and "
          "actord apply takes the dead node out", "[engine][node][failure][apply]") {
  OTHER_NODE_OR_SKIP(node);
  auto engine = test::start_engine(two_nodes(node, "{replicas: 2, threads: 1, placement: [node:local, node:node-b]}"));
  const auto requests = greedy_batch(32, 200);
  auto clean = engine->generate(requests);
  REQUIRE(clean.ok());
  std::mutex m;
  std::condition_variable cv;
  size_t left = requests.size(), events = 0;
  std::vector<std::vector<int32_t>> tokens(requests.size());
  std::vector<std::optional<Error>> errors(requests.size());
  std::optional<std::chrono::steady_clock::time_point> killed_at, last_done;
  for (size_t i = 0; i < requests.size(); ++i) {
    engine->submit(requests[i], [&, i](const StreamEvent& e) {
      std::lock_guard lock(m);
      tokens[i].insert(tokens[i].end(), e.token_ids.begin(), e.token_ids.end());
      if (e.error) errors[i] = e.error;
      if (++events == 200 && !killed_at) {
        killed_at = std::chrono::steady_clock::now();
        node.kill_agent();  // its workers die with it
      }
      if (!e.finish_reason.empty()) {
        last_done = std::chrono::steady_clock::now();
        --left;
        cv.notify_all();
      }
    });
  }
  {
    std::unique_lock lock(m);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return left == 0; }));
  }
  REQUIRE(killed_at);
  size_t failures = 0, differ = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    failures += errors[i].has_value();
    differ += tokens[i] != (*clean)[i].generated_ids;
  }
  CHECK(failures == 0);
  CHECK(differ == 0);
  WARN("killed node agent -> last stream complete " << std::chrono::duration<double>(*last_done - *killed_at).count()
                                                   << " s");
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  CHECK(fleet->replacements >= 1);
  CHECK(fleet->replicas.at(0).state == "serving");
  CHECK(fleet->replicas.at(0).incarnation == 0);
  CHECK(fleet->replicas.at(1).state != "serving");  // its node is gone: rebuilding, then failed and retried
  // The local replica keeps serving.
  auto after = engine->generate(greedy_batch(4, 16));
  REQUIRE(after.ok());
  for (const auto& o : *after) CHECK_FALSE(o.error);
  // The operator takes the dead node out (actord apply of the topology without it): the group is whole again on
  // this machine, the replica that was rebuilding towards node-b retired.
  const std::string without_b = topology_text("[]", "{replicas: 2, threads: 1}");
  auto left_node = engine->apply(without_b, test::source_dir() / "configs/applied.yaml");
  INFO((left_node ? *left_node : left_node.error().message));
  REQUIRE(left_node.ok());
  CHECK(test::eventually([&] {
    auto f = engine->fleet();
    return f.ok() && f->replicas.size() == 2 &&
           std::all_of(f->replicas.begin(), f->replicas.end(), [](const ReplicaInfo& r) {
             return r.state == "serving" && r.nodes == std::vector<std::string>{""};
           });
  }, std::chrono::seconds(10)));
  auto whole = engine->generate(requests);
  REQUIRE(whole.ok());
  check_same_tokens(*whole, *clean);
}

TEST_CASE("two nodes: a node agent killed and started again - its replica, failed meanwhile while the other serves, "
          "is rebuilt on node-b once the agent answers, without an apply", "[engine][node][failure]") {
  OTHER_NODE_OR_SKIP(node);
  auto engine = test::start_engine(two_nodes(node, "{replicas: 2, threads: 1, placement: [node:local, node:node-b]}"));
  const auto requests = greedy_batch(8, 32);
  auto clean = engine->generate(requests);
  REQUIRE(clean.ok());
  auto replica_b = [&]() -> std::optional<ReplicaInfo> {
    auto f = engine->fleet();
    if (!f.ok() || f->replicas.size() != 2) return std::nullopt;
    return f->replicas.at(1);
  };
  const auto killed_at = std::chrono::steady_clock::now();
  node.kill_agent();  // its workers die with it
  // Three quick attempts fail (no agent answers; each asks it off the coordinator's thread and builds nothing), then
  // the replica is marked failed and asked again every 2 s at most.
  REQUIRE(test::eventually([&] {
    auto r = replica_b();
    return r && r->state == "failed";
  }, std::chrono::seconds(40)));
  const double to_failed = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  auto meanwhile = engine->generate(requests);  // the local replica serves alone
  REQUIRE(meanwhile.ok());
  check_same_tokens(*meanwhile, *clean);
  CHECK(replica_b()->state == "failed");
  CHECK_FALSE(replica_b()->last_failure.empty());
  // No rebuild is tried while the agent does not answer (no new incarnation), and the coordinator answers at once
  // meanwhile.
  const uint32_t failed_incarnation = replica_b()->incarnation;
  double slowest = 0;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4); std::chrono::steady_clock::now() < until;) {
    const auto asked = std::chrono::steady_clock::now();
    REQUIRE(replica_b());
    slowest = std::max(slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(slowest < 0.5);
  CHECK(replica_b()->incarnation == failed_incarnation);
  CHECK(replica_b()->state == "failed");
  node.start_agent();
  const auto restarted_at = std::chrono::steady_clock::now();
  REQUIRE(test::eventually([&] {
    auto r = replica_b();
    return r && r->state == "serving";
  }, std::chrono::seconds(30)));
  const double to_serving = std::chrono::duration<double>(std::chrono::steady_clock::now() - restarted_at).count();
  WARN("agent killed -> replica failed " << to_failed << " s; agent started -> replica serving " << to_serving << " s");
  const ReplicaInfo back = *replica_b();
  CHECK(back.nodes == std::vector<std::string>{"node-b"});
  CHECK(back.incarnation == 1);  // built once, when its agent answered: the attempts before were only asks
  CHECK(test::eventually([&] { return !workers_of_agent(node.agent).empty(); }, std::chrono::seconds(5)));
  auto whole = engine->generate(requests);
  REQUIRE(whole.ok());
  check_same_tokens(*whole, *clean);
}

TEST_CASE("two nodes: the ranks a node agent started end when their engine is killed", "[engine][node][failure]") {
  OTHER_NODE_OR_SKIP(node);
  test::TempDir tmp;
  const auto yaml = tmp.path() / "two.yaml";
  test::write_file(yaml, "model: {path: " + test::stories_dir().string() +
                             "}\nengine: {kv_cache_memory: 64MiB}\nnodes: [{name: node-b, address: " +
                             node.agent_address() + "}]\ngroups: [{pp: 2, threads: 1, placement: [node:local, node:node-b]}]\n");
  // An engine in a process of its own (a server: it never ends by itself); killed once node-b's rank runs.
  std::fflush(nullptr);
  const pid_t engine = fork();
  if (engine == 0) {
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    const std::string binary = test::actord_binary().string(), config = yaml.string();
    execl(binary.c_str(), "actord", "serve", config.c_str(), "--port", "0", nullptr);
    _exit(127);
  }
  REQUIRE(test::eventually([&] { return workers_of_agent(node.agent).size() == 1; }, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(engine, SIGKILL);
  waitpid(engine, nullptr, 0);
  // Its worker here died with it (PR_SET_PDEATHSIG); node-b's sees the engine's connection close, or, if it had not
  // connected yet (a slow start under load), its connection refused.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(test::eventually([&] { return workers_of_agent(node.agent).empty(); }, std::chrono::seconds(20)));
  WARN("node-b's worker ended " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                                << " s after its engine was killed");
}

TEST_CASE("two nodes: node-b joins by actord apply and a serving replica moves there and back while requests stream, "
          "then node-b leaves - the running sequences move with their KV across the nodes and every output is "
          "unchanged", "[engine][node][apply]") {
  OTHER_NODE_OR_SKIP(node);
  const std::string with_b = node_b(node);
  auto yaml = [&](const std::string& group, const std::string& nodes) { return topology_text(nodes, group); };
  const std::filesystem::path source = test::source_dir() / "configs/applied.yaml";
  auto topology = parse_topology(yaml("{name: main, threads: 1}", "[]"), source);  // this machine alone
  REQUIRE(topology.ok());
  auto engine = test::start_engine(*topology);
  const auto requests = greedy_batch(8, 400);
  auto clean = engine->generate(requests);
  REQUIRE(clean.ok());
  // A node that stays keeps its address; one still placed on cannot leave.
  auto joined = engine->apply(yaml("{name: main, threads: 1}", "[{name: node-b, address: 'tcp://10.9.9.9:1'}]"), source);
  REQUIRE(joined.ok());  // node-b joins, nothing placed there: nothing rebuilt
  CHECK(*joined == "group main unchanged");
  auto readdressed = engine->apply(yaml("{name: main, threads: 1}", with_b), source);
  REQUIRE_FALSE(readdressed.ok());
  CHECK_THAT(readdressed.error().message,
             Catch::EndsWith("nodes[0].address: node node-b's agent is at tcp://10.9.9.9:1 (its ranks run there); to "
                             "move it, remove the node and add one of another name"));
  REQUIRE(engine->apply(yaml("{name: main, threads: 1}", "[]"), source).ok());  // and leaves again
  const std::vector<std::tuple<std::string, std::string, std::string>> moves = {
      {"{name: main, threads: 1, placement: [node:node-b]}", with_b, "node-b"},
      {"{name: main, tp: 2, threads: 1, placement: [node:node-b]}", with_b, "node-b"},
      {"{name: main, threads: 1, placement: [node:local]}", with_b, ""},
      {"{name: main, threads: 1}", "[]", ""},  // node-b leaves
  };
  for (const auto& [group, nodes, where] : moves) {
    INFO(group << " on nodes " << nodes);
    Result<std::string> applied = Error{Errc::internal, "not applied"};
    auto out = test::generate_while(*engine, requests, [&] { applied = engine->apply(yaml(group, nodes), source); });
    INFO((applied ? *applied : applied.error().message));
    REQUIRE(applied.ok());
    REQUIRE(out.ok());
    check_same_tokens(*out, *clean);
    auto fleet = engine->fleet();
    REQUIRE(fleet.ok());
    REQUIRE(fleet->replicas.size() == 1);
    for (const std::string& n : fleet->replicas[0].nodes) CHECK(n == where);
  }
  engine.reset();
  CHECK(test::worker_processes_of(getpid()).empty());
}
