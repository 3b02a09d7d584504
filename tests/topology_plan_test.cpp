// The plan of a topology for a model (core/topology_plan): ranks, names, placement, threads, layer ranges, head and
// vocabulary shards, weights and KV per rank, and every rule's error message. Pure: no files, no processes.
#include <catch2/catch.hpp>
#include <numeric>

#include "core/micro_batch_split.hpp"
#include "core/topology_plan.hpp"
#include "core/kv_sizing.hpp"
#include "plugins/model_footprint.hpp"

using namespace actord;

namespace {

// stories260K: 5 layers, 8 heads, 4 KV heads of 8, hidden 64, intermediate 172, vocab 512, tied embeddings, f32.
ModelShape stories() {
  ModelShape m;
  m.num_layers = 5;
  m.num_heads = 8;
  m.num_kv_heads = 4;
  m.head_dim = 8;
  m.hidden_size = 64;
  m.intermediate_size = 172;
  m.vocab_size = 512;
  m.tie_word_embeddings = true;
  m.weight_bytes_per_param = 4;
  m.kv_bytes_per_token = 2 * 5 * 4 * 8 * 4;  // 1280
  return m;
}

// A Llama with GQA: 8 query heads, 2 KV heads.
ModelShape gqa() {
  ModelShape m = stories();
  m.num_layers = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 176;
  m.kv_bytes_per_token = 2 * 4 * 2 * 8 * 4;
  return m;
}

TopologyConfig topology(const std::string& groups_yaml, const std::string& rest = "") {
  auto t = parse_topology("model: {path: m}\n" + rest + "groups:\n" + groups_yaml, "t.yaml");
  INFO(groups_yaml);
  REQUIRE(t.ok());
  return *t;
}

TopologyPlan plan_of(const std::string& groups_yaml, const ModelShape& m = stories(), unsigned cores = 64,
                     const std::string& rest = "") {
  auto p = plan_topology(topology(groups_yaml, rest), m, cores);
  INFO(groups_yaml);
  if (!p.ok()) FAIL(p.error().message);
  return *p;
}

std::string error_of(const std::string& groups_yaml, const ModelShape& m = stories(), unsigned cores = 64,
                     const std::string& rest = "") {
  auto p = plan_topology(topology(groups_yaml, rest), m, cores);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().code == Errc::invalid_config);
  return p.error().message;
}

bool same(const Range& r, int first, int count) { return r.first == first && r.count == count; }

// Parameters of stories260K's pieces (see rank_params): per layer with tp t, the embedding, the final norm.
uint64_t stories_layer(int tp) {
  const uint64_t q = 64 / tp, kv = 32 / tp, ff = 172 / tp;
  return 2 * 64 * q + 2 * 64 * kv + 3 * 64 * ff + 2 * 64;
}

}  // namespace

TEST_CASE("one rank holds the whole model - its weights are model_footprint's estimate", "[plan]") {
  const TopologyPlan plan = plan_of("  - {name: main}\n", stories(), 4);
  REQUIRE(plan.groups.size() == 1);
  const GroupPlan& g = plan.groups[0];
  REQUIRE(g.ranks.size() == 1);
  const RankPlan& r = g.ranks[0];
  CHECK(r.name == "main/replica/0/worker/tp0.pp0");
  CHECK(r.node == "local");
  CHECK(r.placement == Placement::thread);
  CHECK(r.threads == 4);  // threads 0: every core of the machine
  CHECK(same(r.layers, 0, 5));
  CHECK(same(r.heads, 0, 8));
  CHECK(same(r.kv_heads, 0, 4));
  CHECK(same(r.vocab, 0, 512));
  CHECK((r.embedding && r.lm_head));
  CHECK(r.weight_params == 5 * stories_layer(1) + 512 * 64 + 64);
  CHECK(r.weight_bytes == plan.model_weight_bytes);
  CHECK(r.kv_bytes_per_token == 1280);
  CHECK(g.num_kv_blocks == (256u << 20) / (1280 * 16));
  CHECK(r.kv_pool_bytes == uint64_t(g.num_kv_blocks) * 1280 * 16);
  CHECK(r.swap_bytes == 0);
  CHECK(r.memory_bytes() == r.weight_bytes + r.kv_pool_bytes);
  CHECK(plan.local_threads == 4);
  CHECK_FALSE(plan.oversubscribed);
  REQUIRE(plan.nodes.size() == 1);
  CHECK(plan.nodes[0].ranks == 1);
  CHECK(plan.nodes[0].processes == 0);  // a thread of the engine's process

  // The same arithmetic as plugins/model_footprint (the engine's memory check) and core/kv_sizing.
  ModelConfig c;
  c.num_layers = 5, c.num_heads = 8, c.num_kv_heads = 4, c.head_dim = 8, c.hidden_size = 64;
  c.intermediate_size = 172, c.vocab_size = 512, c.tie_word_embeddings = true;
  CHECK(plan.model_weight_bytes == estimated_weight_bytes(c, DType::f32));
  CHECK(g.num_kv_blocks == size_kv_cache(EngineSection{}, c.kv_bytes_per_token(DType::f32), "").value().num_blocks);
  // An MoE model with biases and an untied lm_head too.
  c.num_experts = 4, c.attention_bias = true, c.tie_word_embeddings = false;
  ModelShape moe = stories();
  moe.num_experts = 4, moe.attention_bias = true, moe.tie_word_embeddings = false, moe.weight_bytes_per_param = 2;
  CHECK(plan_of("  - {name: main}\n", moe).model_weight_bytes == estimated_weight_bytes(c, DType::bf16));
  // Experts of their own width and a shared expert (Qwen2-MoE).
  c.moe_intermediate_size = 32, c.shared_expert_intermediate_size = 96;
  moe.moe_intermediate_size = 32, moe.shared_expert_intermediate_size = 96;
  CHECK(plan_of("  - {name: main}\n", moe).model_weight_bytes == estimated_weight_bytes(c, DType::bf16));
}

TEST_CASE("tp splits the heads, the KV heads, the MLP and the vocabulary - norms are replicated", "[plan]") {
  const TopologyPlan plan = plan_of("  - {tp: 2}\n");
  const GroupPlan& g = plan.groups[0];
  REQUIRE(g.ranks.size() == 2);
  CHECK(g.ranks[0].name == "main/replica/0/worker/tp0.pp0");
  CHECK(g.ranks[1].name == "main/replica/0/worker/tp1.pp0");
  CHECK(same(g.ranks[0].heads, 0, 4));
  CHECK(same(g.ranks[1].heads, 4, 4));
  CHECK(same(g.ranks[0].kv_heads, 0, 2));
  CHECK(same(g.ranks[1].kv_heads, 2, 2));
  CHECK(same(g.ranks[0].vocab, 0, 256));
  CHECK(same(g.ranks[1].vocab, 256, 256));
  CHECK(g.kv_replication == 1);
  for (const auto& r : g.ranks) {
    CHECK(same(r.layers, 0, 5));
    CHECK(r.weight_params == 5 * stories_layer(2) + 256 * 64 + 64);
    CHECK(r.kv_bytes_per_token == 640);
  }
  // Together they hold the model once, plus a copy of the norms each.
  CHECK(g.ranks[0].weight_params + g.ranks[1].weight_params == plan.model_weight_bytes / 4 + 5 * 128 + 64);
  CHECK(g.num_kv_blocks == (256u << 20) / (640 * 16));
}

TEST_CASE("ep shards whole experts over the tp ranks - attention stays TP-sharded - the rest as tp", "[plan][ep]") {
  ModelShape moe = stories();
  moe.num_experts = 8, moe.intermediate_size = 256, moe.moe_intermediate_size = 96;
  const TopologyPlan tp = plan_of("  - {tp: 2}\n", moe), ep = plan_of("  - {tp: 2, ep: 2}\n", moe);
  REQUIRE(ep.groups[0].ranks.size() == 2);
  CHECK(ep.groups[0].ep == 2);
  for (int k = 0; k < 2; ++k) {
    const RankPlan& r = ep.groups[0].ranks[size_t(k)];
    CHECK(same(r.experts, 4 * k, 4));
    CHECK(same(tp.groups[0].ranks[size_t(k)].experts, 0, 8));
    CHECK(same(r.heads, 4 * k, 4));
    // Half the experts whole instead of every expert's half: the same weights per rank.
    CHECK(r.weight_params == tp.groups[0].ranks[size_t(k)].weight_params);
  }
  const RankShard shard = shard_of_rank(moe, 2, 1, 1, 0, 2);
  CHECK(same(shard.experts, 4, 4));
  CHECK(same(shard.expert_intermediate, 0, 96));
  // moe_intermediate_size need not divide by tp when whole experts are held.
  moe.moe_intermediate_size = 30;
  CHECK(plan_of("  - {tp: 2, ep: 2}\n", moe).groups[0].ranks[1].experts.first == 4);
  CHECK(error_of("  - {tp: 2, ep: 2}\n") ==
        "t.yaml: groups[0].ep: needs a mixture-of-experts model (num_local_experts or num_experts in config.json); "
        "this one is dense, got 2");
  moe.num_experts = 6;
  CHECK(error_of("  - {tp: 4, ep: 4}\n", moe) == "t.yaml: groups[0].ep: must divide the number of experts (6), got 4");
  auto t = parse_topology("model: {path: m}\ngroups:\n  - {tp: 2, ep: 3}\n", "t.yaml");
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message ==
        "t.yaml: groups[0].ep: must be 1 or a multiple of tp (2): the experts are sharded over a stage's tp ranks, or "
        "over ep / tp attention data parallel lanes of tp ranks, got 3");
  // EPLB: redundant slots count in each rank's weights; they need ep.
  moe.num_experts = 8;
  const TopologyPlan redundant = plan_of("  - {tp: 2, ep: 2, num_redundant_experts: 2}\n", moe);
  CHECK(redundant.groups[0].ranks[0].redundant_experts == 2);
  CHECK(redundant.groups[0].ranks[0].weight_params > plan_of("  - {tp: 2, ep: 2}\n", moe).groups[0].ranks[0].weight_params);
  for (const char* bad : {"{tp: 2, num_redundant_experts: 2}", "{tp: 2, eplb_step_interval: 10}"}) {
    auto refused = parse_topology(std::string("model: {path: m}\ngroups:\n  - ") + bad + "\n", "t.yaml");
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message, Catch::EndsWith("needs expert parallelism (ep > 1)"));
  }
  // An afd group's experts live in its FFN pool, where EPLB is not built: refused naming the key.
  auto afd = parse_topology(
      "model: {path: m}\ngroups:\n  - {afd: {attention: {workers: 1}, ffn: {workers: 2}}, num_redundant_experts: 2}\n",
      "t.yaml");
  REQUIRE_FALSE(afd.ok());
  CHECK_THAT(afd.error().message,
             Catch::EndsWith("groups[0].num_redundant_experts: is not built for an afd group's FFN pool yet (EPLB "
                             "places experts over ep ranks)"));
}

TEST_CASE("ep beyond tp - attention data parallel lanes of tp ranks - each lane its own KV pool - experts over all "
          "ranks - lanes are the units nodes take", "[plan][ep][lanes]") {
  ModelShape moe = stories();
  moe.num_experts = 8;
  const TopologyPlan plan = plan_of("  - {tp: 2, ep: 4, replicas: 2}\n", moe);
  const GroupPlan& g = plan.groups[0];
  CHECK(g.lanes == 2);
  REQUIRE(g.ranks.size() == 8);  // 2 replicas x 2 lanes x tp 2
  const TopologyPlan single = plan_of("  - {tp: 2}\n", moe);
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    const RankPlan& r = g.ranks[i];
    INFO(r.name);
    const int lane = int(i / 2) % 2, k = int(i % 2);
    CHECK(r.replica == int(i / 4));
    CHECK(r.lane == lane);
    CHECK(r.tp_rank == k);
    CHECK(r.name == "main/replica/" + std::to_string(i / 4) + "/worker/dp" + std::to_string(lane) + ".tp" +
                        std::to_string(k) + ".pp0");
    CHECK(same(r.experts, 2 * (lane * 2 + k), 2));  // EP rank lane * tp + tp rank
    CHECK(same(r.heads, 4 * k, 4));                  // attention sharded over the lane's tp ranks
    CHECK(r.kv_pool_bytes == single.groups[0].ranks[size_t(k)].kv_pool_bytes);  // a whole pool per lane
  }
  CHECK(same(shard_of_rank(moe, 1, 1, 0, 0, 4, 3).experts, 6, 2));
  // Lanes compute at once: every rank counts for the cores.
  CHECK(error_of("  - {ep: 4, threads: 1}\n", moe, 3) ==
        "t.yaml: groups[0].threads: 4 ranks at once x 1 thread on this machine need 4 cores, it has 3; lower "
        "threads, tp, pp or replicas, place ranks on other nodes, or set groups[0].oversubscribe: true");
  auto staged = parse_topology("model: {path: m}\ngroups:\n  - {ep: 2, pp: 2}\n", "t.yaml");
  REQUIRE_FALSE(staged.ok());
  CHECK(staged.error().message == "t.yaml: groups[0].ep: beyond tp (attention data parallel lanes) needs pp 1, got pp 2");
  CHECK(parallelism_problem(moe, 1, 2, 2) == "ep beyond tp (attention data parallel lanes) needs pp 1, got pp 2");
  // A list of nodes spreads the lanes: EP across nodes.
  const TopologyPlan spread = plan_of("  - {ep: 2, placement: [node:local, node:b], threads: 1}\n", moe, 64,
                                      "nodes: [{name: b, address: 'tcp://10.0.0.2:7000'}]\n");
  REQUIRE(spread.groups[0].ranks.size() == 2);
  CHECK(spread.groups[0].ranks[0].node == "local");
  CHECK(spread.groups[0].ranks[1].node == "b");
  auto over = parse_topology("model: {path: m}\nnodes: [{name: b, address: 'tcp://b:1'}, {name: c, address: "
                             "'tcp://c:1'}]\ngroups:\n  - {ep: 2, placement: [node:local, node:b, node:c]}\n",
                             "t.yaml");
  REQUIRE_FALSE(over.ok());
  CHECK_THAT(over.error().message, Catch::EndsWith("lists 3 nodes, but the group has only 2 replica lanes (replicas x "
                                                   "ep/tp) to spread over them"));
  moe.num_experts = 6;
  CHECK(error_of("  - {ep: 4}\n", moe) == "t.yaml: groups[0].ep: must divide the number of experts (6), got 4");
}

TEST_CASE("afd - each replica's attention lanes then its FFN workers - the FFN workers hold the MLP slices or the "
          "experts and no KV - nodes take lanes and FFN workers", "[plan][afd]") {
  ModelShape moe = stories();
  moe.num_experts = 8;
  const TopologyPlan plan =
      plan_of("  - {replicas: 2, afd: {attention: {workers: 2, tp: 2}, ffn: {workers: 2}}, oversubscribe: true}\n", moe);
  const GroupPlan& g = plan.groups[0];
  CHECK(g.lanes == 1);
  CHECK(g.ffn_workers == 2);
  REQUIRE(g.ranks.size() == 8);  // 2 replicas x (1 lane of tp 2 + 2 FFN workers)
  const TopologyPlan colocated = plan_of("  - {tp: 2}\n", moe);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) {
      const RankPlan& a = g.ranks[size_t(r * 4 + k)];
      INFO(a.name);
      CHECK(a.name == "main/replica/" + std::to_string(r) + "/worker/tp" + std::to_string(k) + ".pp0");
      CHECK(a.ffn_rank == -1);
      CHECK(a.experts.count == 0);
      CHECK(a.kv_pool_bytes == colocated.groups[0].ranks[size_t(k)].kv_pool_bytes);
      CHECK(a.weight_params < colocated.groups[0].ranks[size_t(k)].weight_params);  // no experts
    }
    for (int f = 0; f < 2; ++f) {
      const RankPlan& x = g.ranks[size_t(r * 4 + 2 + f)];
      INFO(x.name);
      CHECK(x.name == "main/replica/" + std::to_string(r) + "/ffn/" + std::to_string(f));
      CHECK(x.ffn_rank == f);
      CHECK(same(x.experts, 4 * f, 4));
      CHECK(same(x.layers, 0, moe.num_layers));
      CHECK(x.kv_pool_bytes == 0);
      CHECK(x.weight_params == uint64_t(moe.num_layers) * 4 * 3 * uint64_t(moe.hidden_size) * uint64_t(moe.intermediate_size));
    }
  }
  // A dense model: the FFN workers split its MLPs.
  const TopologyPlan dense = plan_of("  - {afd: {attention: {workers: 1}, ffn: {workers: 2}}}\n", stories());
  REQUIRE(dense.groups[0].ranks.size() == 3);
  CHECK(same(dense.groups[0].ranks[2].ffn_intermediate, stories().intermediate_size / 2, stories().intermediate_size / 2));
  // Every worker computes at once; a list of nodes spreads each replica's lanes, then its FFN workers.
  CHECK(error_of("  - {afd: {attention: {workers: 2}, ffn: {workers: 2}}, threads: 1}\n", moe, 3) ==
        "t.yaml: groups[0].threads: 4 ranks at once x 1 thread on this machine need 4 cores, it has 3; lower "
        "threads, tp, pp or replicas, place ranks on other nodes, or set groups[0].oversubscribe: true");
  const TopologyPlan spread =
      plan_of("  - {afd: {attention: {workers: 1}, ffn: {workers: 1}}, placement: [node:local, node:b], threads: 1}\n",
              moe, 64, "nodes: [{name: b, address: 'tcp://10.0.0.2:7000'}]\n");
  REQUIRE(spread.groups[0].ranks.size() == 2);
  CHECK(spread.groups[0].ranks[0].node == "local");
  CHECK(spread.groups[0].ranks[1].node == "b");
  CHECK(ffn_pool_problem(moe, 3) == "afd.ffn.workers must divide the number of experts (8): each FFN worker holds "
                                    "whole experts, got 3");
}

TEST_CASE("KV heads are replicated when tp exceeds them", "[plan]") {
  const TopologyPlan plan = plan_of("  - {tp: 4}\n", gqa());
  const GroupPlan& g = plan.groups[0];
  CHECK(g.kv_replication == 2);
  REQUIRE(g.ranks.size() == 4);
  for (int k = 0; k < 4; ++k) {
    INFO("tp" << k);
    CHECK(same(g.ranks[k].heads, 2 * k, 2));
    CHECK(same(g.ranks[k].kv_heads, k / 2, 1));
    CHECK(g.ranks[k].kv_bytes_per_token == 4 * 1 * 2 * 8 * 4);  // every layer, one KV head, K and V
  }
  CHECK(plan_of("  - {tp: 8}\n", gqa()).groups[0].kv_replication == 4);
}

TEST_CASE("pp splits the layers evenly - earlier stages take the extra - first holds the embedding, last the head",
          "[plan]") {
  const TopologyPlan plan = plan_of("  - {pp: 2}\n");
  const auto& ranks = plan.groups[0].ranks;
  REQUIRE(ranks.size() == 2);
  CHECK(ranks[0].name == "main/replica/0/worker/tp0.pp0");
  CHECK(ranks[1].name == "main/replica/0/worker/tp0.pp1");
  CHECK(same(ranks[0].layers, 0, 3));
  CHECK(same(ranks[1].layers, 3, 2));
  CHECK((ranks[0].embedding && !ranks[0].lm_head));
  CHECK((!ranks[1].embedding && ranks[1].lm_head));
  CHECK(ranks[0].weight_params == 3 * stories_layer(1) + 512 * 64);
  // The tied embedding: the last stage holds its own copy as lm_head, and the final norm.
  CHECK(ranks[1].weight_params == 2 * stories_layer(1) + 512 * 64 + 64);
  CHECK(ranks[0].kv_bytes_per_token == 3 * 4 * 64);
  CHECK(ranks[1].kv_bytes_per_token == 2 * 4 * 64);
  // The replica's blocks are what its largest rank fits; each rank's pool holds that many of its own.
  const uint32_t blocks = (256u << 20) / (768 * 16);
  CHECK(plan.groups[0].num_kv_blocks == blocks);
  CHECK(ranks[1].kv_pool_bytes == uint64_t(blocks) * 512 * 16);

  std::vector<int> counts;
  for (const auto& r : plan_of("  - {pp: 3}\n").groups[0].ranks) counts.push_back(r.layers.count);
  CHECK(counts == std::vector<int>{2, 2, 1});
  const auto five = plan_of("  - {pp: 5}\n").groups[0].ranks;
  for (int s = 0; s < 5; ++s) CHECK(same(five[s].layers, s, 1));
  CHECK(five[2].vocab.count == 0);  // a middle stage holds no vocabulary rows
}

TEST_CASE("replicas x pp x tp ranks are named and ordered replica, stage, tp rank", "[plan]") {
  const TopologyPlan plan = plan_of("  - {name: big, replicas: 2, tp: 2, pp: 2, placement: process}\n");
  std::vector<std::string> names;
  for (const auto& r : plan.groups[0].ranks) names.push_back(r.name);
  CHECK(names == std::vector<std::string>{
                     "big/replica/0/worker/tp0.pp0", "big/replica/0/worker/tp1.pp0", "big/replica/0/worker/tp0.pp1",
                     "big/replica/0/worker/tp1.pp1", "big/replica/1/worker/tp0.pp0", "big/replica/1/worker/tp1.pp0",
                     "big/replica/1/worker/tp0.pp1", "big/replica/1/worker/tp1.pp1"});
  CHECK(plan.nodes[0].ranks == 8);
  CHECK(plan.nodes[0].processes == 8);
  // Two groups: each its own ranks and its own KV blocks.
  const TopologyPlan two = plan_of("  - {name: a}\n  - {name: b, tp: 2}\n");
  REQUIRE(two.groups.size() == 2);
  CHECK(two.groups[1].ranks[1].name == "b/replica/0/worker/tp1.pp0");
  CHECK(two.groups[1].num_kv_blocks == 2 * two.groups[0].num_kv_blocks);
}

TEST_CASE("a list of nodes spreads the replica stages in order - tp ranks of a stage share a node", "[plan]") {
  const std::string nodes = "nodes: [{name: b, address: 'tcp://10.0.0.2:7000'}, {name: c, address: 'tcp://c:1'}]\n";
  const TopologyPlan dp = plan_of("  - {replicas: 3, tp: 2, placement: [node:local, node:b], threads: 1}\n", stories(),
                                  64, nodes);
  std::vector<std::string> where;
  for (const auto& r : dp.groups[0].ranks) where.push_back(r.node);
  CHECK(where == std::vector<std::string>{"local", "local", "local", "local", "b", "b"});
  REQUIRE(dp.nodes.size() == 3);
  CHECK(dp.nodes[0].name == "local");
  CHECK(dp.nodes[0].ranks == 4);
  CHECK(dp.nodes[1].name == "b");
  CHECK(dp.nodes[1].address == "tcp://10.0.0.2:7000");
  CHECK(dp.nodes[1].ranks == 2);
  CHECK(dp.nodes[1].processes == 2);
  CHECK(dp.nodes[2].ranks == 0);  // listed, unused
  CHECK(dp.nodes[0].weight_bytes == 4 * dp.groups[0].ranks[0].weight_bytes);

  const TopologyPlan pp = plan_of("  - {pp: 2, placement: [node:b, node:local]}\n", stories(), 64, nodes);
  CHECK(pp.groups[0].ranks[0].node == "b");
  CHECK(pp.groups[0].ranks[0].threads == 0);  // resolved by node b
  CHECK(pp.groups[0].ranks[1].node == "local");
  CHECK(pp.groups[0].ranks[1].threads == 64);  // the only rank here: every core
  CHECK(plan_of("  - {placement: 'node:c'}\n", stories(), 64, nodes).groups[0].ranks[0].node == "c");
}

TEST_CASE("threads 0 shares the cores left by explicit threads among the ranks on this machine", "[plan]") {
  auto threads_of = [](const TopologyPlan& p) {
    std::vector<int> t;
    for (const auto& g : p.groups)
      for (const auto& r : g.ranks) t.push_back(r.threads);
    return t;
  };
  CHECK(threads_of(plan_of("  - {tp: 2}\n", stories(), 5)) == std::vector<int>{3, 2});
  CHECK(threads_of(plan_of("  - {name: a, threads: 2}\n  - {name: b, tp: 2}\n", stories(), 6)) ==
        std::vector<int>{2, 2, 2});
  CHECK(threads_of(plan_of("  - {tp: 2, threads: 3}\n", stories(), 6)) == std::vector<int>{3, 3});
  // A replica's pipeline stages take turns: each stage's ranks get the share of their tp rank, and count once.
  const TopologyPlan staged = plan_of("  - {tp: 2, pp: 2}\n", stories(), 2);
  CHECK(threads_of(staged) == std::vector<int>{1, 1, 1, 1});
  CHECK_FALSE(staged.oversubscribed);
  CHECK(staged.local_threads == 2);
  CHECK(threads_of(plan_of("  - {pp: 2}\n", stories(), 2)) == std::vector<int>{2, 2});
  CHECK(threads_of(plan_of("  - {replicas: 2, pp: 2}\n", stories(), 4)) == std::vector<int>{2, 2, 2, 2});
  // Oversubscribed where allowed: one thread each at least.
  const TopologyPlan over = plan_of("  - {replicas: 2, tp: 2, pp: 2, oversubscribe: true}\n", stories(), 2);
  CHECK(threads_of(over) == std::vector<int>(8, 1));
  CHECK(over.oversubscribed);
  CHECK(over.local_threads == 4);
  CHECK_FALSE(plan_of("  - {tp: 2}\n", stories(), 2).oversubscribed);
}

TEST_CASE("threads that do not fit the machine are refused naming the key and both numbers", "[plan]") {
  CHECK(error_of("  - {replicas: 2, tp: 2, pp: 2}\n", stories(), 2) ==
        "t.yaml: groups[0].threads: 4 ranks at once x 1 thread on this machine need 4 cores, it has 2; lower threads, "
        "tp, pp or replicas, place ranks on other nodes, or set groups[0].oversubscribe: true");
  CHECK(check_threads_fit(topology("  - {tp: 2, pp: 2}\n"), 2).ok());  // the two stages take turns
  CHECK(error_of("  - {threads: 8}\n", stories(), 4) ==
        "t.yaml: groups[0].threads: 1 rank at once x 8 threads on this machine need 8 cores, it has 4; lower threads, tp, "
        "pp or replicas, place ranks on other nodes, or set groups[0].oversubscribe: true");
  CHECK(error_of("  - {name: a, threads: 2, oversubscribe: true}\n  - {name: b, tp: 2, threads: 2}\n", stories(), 4) ==
        "t.yaml: groups[1].threads: 2 ranks at once x 2 threads on this machine need 4 cores (6 with the other groups' ranks), "
        "it has 4; lower threads, tp, pp or replicas, place ranks on other nodes, or set groups[1].oversubscribe: "
        "true");
  // Ranks on other nodes do not count here.
  const std::string nodes = "nodes: [{name: b, address: 'tcp://b:7000'}]\n";
  const TopologyConfig remote = topology("  - {pp: 2, threads: 2, placement: [node:local, node:b]}\n", nodes);
  CHECK(check_threads_fit(remote, 2).ok());
  CHECK(check_threads_fit(topology("  - {tp: 2, pp: 2, oversubscribe: true}\n"), 1).ok());
  CHECK_FALSE(check_threads_fit(topology("  - {tp: 2, pp: 2}\n"), 1).ok());
  CHECK(check_threads_fit(topology("  - {tp: 2}\n"), 2).ok());
  CHECK_FALSE(check_threads_fit(topology("  - {tp: 2}\n"), 1).ok());
}

TEST_CASE("the model's rules name the group's key, the model's number and the value", "[plan]") {
  CHECK(error_of("  - {tp: 3}\n") == "t.yaml: groups[0].tp: must divide num_attention_heads (8), got 3");
  CHECK(error_of("  - {name: a}\n  - {name: b, tp: 16}\n") ==
        "t.yaml: groups[1].tp: must divide num_attention_heads (8), got 16");
  ModelShape twelve = stories();
  twelve.num_heads = 12;
  CHECK(error_of("  - {tp: 6}\n", twelve) ==
        "t.yaml: groups[0].tp: must divide num_key_value_heads (4) or be a multiple of it (each KV head is then "
        "replicated), got 6");
  CHECK(error_of("  - {tp: 8}\n") == "t.yaml: groups[0].tp: must divide intermediate_size (172), got 8");
  ModelShape experts = stories();
  experts.num_experts = 4, experts.moe_intermediate_size = 30, experts.shared_expert_intermediate_size = 20;
  CHECK(error_of("  - {tp: 4}\n", experts) == "t.yaml: groups[0].tp: must divide moe_intermediate_size (30), got 4");
  experts.moe_intermediate_size = 32, experts.intermediate_size = 256;
  CHECK(error_of("  - {tp: 8}\n", experts) ==
        "t.yaml: groups[0].tp: must divide shared_expert_intermediate_size (20), got 8");
  ModelShape tiny_vocab = stories();
  tiny_vocab.vocab_size = 2;
  CHECK(error_of("  - {tp: 4}\n", tiny_vocab) == "t.yaml: groups[0].tp: must be at most vocab_size (2), got 4");
  CHECK(error_of("  - {pp: 6}\n") == "t.yaml: groups[0].pp: must be at most num_hidden_layers (5), got 6");
  // The heads come first, as a reader checks them.
  CHECK(error_of("  - {tp: 3, pp: 6}\n") == "t.yaml: groups[0].tp: must divide num_attention_heads (8), got 3");
}

TEST_CASE("a KV pool or swap space that holds no block of the largest rank is refused by its key", "[plan]") {
  CHECK(error_of("  - {tp: 2}\n", stories(), 64, "engine: {kv_cache_memory: 10000}\n") ==
        "t.yaml: engine.kv_cache_memory: 10000 bytes hold no KV block (one block takes 10240 bytes)");
  CHECK(error_of("  - {pp: 2}\n", stories(), 64, "engine: {kv_cache_memory: 12287}\n") ==
        "t.yaml: engine.kv_cache_memory: 12287 bytes hold no KV block (one block takes 12288 bytes)");
  CHECK(error_of("  - {}\n", stories(), 64, "engine: {preemption_mode: swap, swap_space: 100}\n") ==
        "t.yaml: engine.swap_space: 100 bytes hold no KV block (one block takes 20480 bytes)");
  const TopologyPlan swap =
      plan_of("  - {tp: 2}\n", stories(), 64, "engine: {preemption_mode: swap, swap_space: 1MiB}\n");
  CHECK(swap.groups[0].num_swap_blocks == (1u << 20) / 10240);
  CHECK(swap.groups[0].ranks[0].swap_bytes == uint64_t(swap.groups[0].num_swap_blocks) * 10240);
}

TEST_CASE("a model shape with a zero count is an error, not a division by zero", "[plan]") {
  ModelShape broken = stories();
  broken.num_kv_heads = 0;
  auto p = plan_topology(topology("  - {}\n"), broken, 4);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().message == "model shape: num_kv_heads must be positive, got 0");
}

TEST_CASE("micro-batch cuts - whole sequences in order - each cut nearest its share of the tokens - two halves as "
          "even as they get - fewer slices than micro-batches leave the last ones empty", "[plan][tbo]") {
  auto bounds = [](std::vector<int> tokens, int m) {
    return micro_batch_bounds(tokens.size(), m, [&](size_t i) { return tokens[i]; });
  };
  using V = std::vector<size_t>;
  CHECK(bounds({1, 1, 1, 1}, 2) == V{0, 2, 4});
  CHECK(bounds({10, 1, 1, 1}, 2) == V{0, 1, 4});   // 10 | 3: the most even halves
  CHECK(bounds({1, 1, 1, 10}, 2) == V{0, 3, 4});   // each half keeps a slice
  CHECK(bounds({2, 2, 2, 2, 2, 2}, 3) == V{0, 2, 4, 6});
  CHECK(bounds({6, 1, 1, 1, 1, 1, 1}, 3) == V{0, 1, 3, 7});  // cuts nearest 4 and 8 of 12 tokens: 6 | 2 | 4
  CHECK(bounds({1, 1, 1}, 3) == V{0, 1, 2, 3});
  CHECK(bounds({5}, 2) == V{0, 1, 1});              // one slice: the second micro-batch is empty
  CHECK(bounds({}, 3) == V{0, 0, 0, 0});
  CHECK(bounds({3, 3}, 4) == V{0, 1, 2, 2, 2});
  const std::vector<int> t = {4, 1, 1, 7, 2};
  CHECK(micro_batch_tokens(t.size(), 2, [&](size_t i) { return t[i]; }) == std::vector<int64_t>{6, 9});
  // The group's key: 2 to 8 micro-batches, with tbo.
  for (const auto& [group, message] :
       {std::pair<std::string, std::string>{"{tbo: true, micro_batches: 1}", "groups[0].micro_batches: must be 2 to 8, got 1"},
        {"{tbo: true, micro_batches: 9}", "groups[0].micro_batches: must be 2 to 8, got 9"},
        {"{micro_batches: 3}", "groups[0].micro_batches: needs tbo: true (it says how many micro-batches two-batch "
                               "overlap runs)"}}) {
    auto bad = parse_topology("model: {path: m}\ngroups:\n  - " + group + "\n", "t.yaml");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message == "t.yaml: " + message);
  }
}
