// Attention-FFN disaggregation (groups[].afd) through the whole engine: attention workers (KV cache, attention,
// embedding, lm_head) and an FFN pool (the dense MLPs split over it, or the experts sharded over it) in worker
// processes give the same greedy tokens and logprobs as one colocated worker, at A:F ratios 1:1, 2:1 and 1:2, for
// stories260K (dense), a random Mixtral and a random Qwen3-MoE with a dense layer among its MoE layers, in f32.
// Also: the attention pool as a tp2 lane and as threads, an FFN worker killed mid-run (the replica is rebuilt and
// the requests complete unchanged), and the topologies AFD refuses, each with an error naming its key.
#include <catch2/catch.hpp>

#include "parallel_test_util.hpp"

using namespace actord;
using namespace actord::test;  // parallel_test_util.hpp: batch, run, check_same, ...

namespace {

// configs/afd.yaml (one attention and one FFN worker, processes) with A attention and F FFN workers and `more`.
std::vector<std::string> ratio(int attention, int ffn, std::vector<std::string> more = {}) {
  more.push_back("groups[0].afd.attention.workers=" + std::to_string(attention));
  more.push_back("groups[0].afd.ffn.workers=" + std::to_string(ffn));
  return more;
}

}  // namespace

TEST_CASE("attention-FFN disaggregation: stories260K at 1:1 2:1 and 1:2 in processes equals one colocated worker",
          "[engine][parallel][afd]") {
  const auto requests = batch(true);
  const auto expected = run(test::quickstart(), requests);
  for (auto [attention, ffn] : {std::pair{1, 1}, {2, 1}, {1, 2}}) {
    DYNAMIC_SECTION(attention << ":" << ffn) {
      check_same(expected, run(test::quickstart("configs/afd.yaml", ratio(attention, ffn)), requests));
    }
  }
  SECTION("threads, 1:2") {
    check_same(expected,
               run(test::quickstart("configs/afd.yaml", ratio(1, 2, {"groups[0].placement=thread"})), requests));
  }
  SECTION("an attention lane of tp2 and one FFN worker") {
    check_same(expected,
               run(test::quickstart("configs/afd.yaml", ratio(2, 1, {"groups[0].afd.attention.tp=2"})), requests));
  }
}

TEST_CASE("attention-FFN disaggregation: random Mixtral and Qwen3-MoE (a dense layer among its MoE layers) at 1:1 "
          "2:1 and 1:2 in processes equal one colocated worker", "[engine][parallel][afd][ep]") {
  test::TempDir tmp;
  const auto mixtral = write_mixtral(tmp.path() / "mixtral");
  const auto qwen3_moe = write_moe(tmp.path() / "qwen3-moe", "Qwen3MoeForCausalLM",
                                   R"("num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                                      "norm_topk_prob": true, "mlp_only_layers": [1])");
  const auto requests = batch(false);
  for (const auto& dir : {mixtral, qwen3_moe}) {
    const auto expected = run(dummy_topology(dir, "configs/quickstart.yaml", {}), requests);
    for (auto [attention, ffn] : {std::pair{1, 1}, {2, 1}, {1, 2}}) {
      DYNAMIC_SECTION(dir.filename().string() << " " << attention << ":" << ffn) {
        check_same(expected, run(dummy_topology(dir, "configs/afd.yaml", ratio(attention, ffn)), requests));
      }
    }
  }
}

TEST_CASE("attention-FFN disaggregation with ping-pong micro-batches (tbo, two or three) and attention lanes with tbo "
          "give the tokens of one colocated worker", "[engine][parallel][afd][tbo]") {
  const auto requests = batch(true);
  const auto expected = run(test::quickstart(), requests);
  for (auto [attention, ffn] : {std::pair{1, 1}, {2, 1}, {1, 2}}) {
    DYNAMIC_SECTION("stories260K " << attention << ":" << ffn) {
      check_same(expected, run(test::quickstart("configs/afd.yaml", ratio(attention, ffn, {"groups[0].tbo=true"})),
                               requests));
    }
  }
  SECTION("stories260K, an attention lane of tp2 and two FFN workers, threads") {
    check_same(expected, run(test::quickstart("configs/afd.yaml",
                                              ratio(2, 2, {"groups[0].afd.attention.tp=2", "groups[0].tbo=true",
                                                           "groups[0].placement=thread"})),
                             requests));
  }
  test::TempDir tmp;
  const auto mixtral = write_mixtral(tmp.path() / "mixtral");
  const auto moe_requests = batch(false);
  const auto moe_expected = run(dummy_topology(mixtral, "configs/quickstart.yaml", {}), moe_requests);
  SECTION("Mixtral 2:1") {
    check_same(moe_expected, run(dummy_topology(mixtral, "configs/afd.yaml", ratio(2, 1, {"groups[0].tbo=true"})),
                                 moe_requests));
  }
  SECTION("three micro-batches: stories260K 1:1 and Mixtral 1:2 in threads") {
    check_same(expected, run(test::quickstart("configs/afd.yaml",
                                              ratio(1, 1, {"groups[0].tbo=true", "groups[0].micro_batches=3"})),
                             requests));
    check_same(moe_expected,
               run(dummy_topology(mixtral, "configs/afd.yaml",
                                  ratio(1, 2, {"groups[0].tbo=true", "groups[0].micro_batches=3",
                                               "groups[0].placement=thread"})),
                   moe_requests));
  }
  SECTION("Mixtral, two attention data parallel lanes (ep2) without AFD") {
    check_same(moe_expected,
               run(dummy_topology(mixtral, "configs/quickstart.yaml", {"groups[0].ep=2", "groups[0].tbo=true"}),
                   moe_requests));
  }
}

TEST_CASE("attention-FFN disaggregation: an FFN worker killed mid-run - the replica is rebuilt and the requests "
          "complete unchanged", "[engine][parallel][afd][failure]") {
  auto engine = test::start_engine(test::quickstart("configs/afd.yaml", ratio(1, 2)));
  std::vector<GenerateRequest> requests = batch(true);
  requests.resize(2);
  for (auto& r : requests) r.max_tokens = 200;
  test::check_rank_kill_recovers(engine, requests, "replica/0/ffn/1", 3);
}

TEST_CASE("attention-FFN disaggregation: impossible pools are refused with the key - before anything starts",
          "[engine][parallel][afd]") {
  auto file_error = [](std::vector<std::string> set) {
    TopologyOverrides o;
    o.set = std::move(set);
    auto bad = load_topology(test::source_dir() / "configs/afd.yaml", o);
    REQUIRE_FALSE(bad.ok());
    return bad.error().message;
  };
  CHECK_THAT(file_error({"groups[0].tp=2"}),
             Catch::EndsWith("groups[0].afd: sets the parallelism of its pools itself: leave groups[0].tp, .pp and .ep "
                             "at 1 (got tp 2, pp 1, ep 1); use afd.attention.tp"));
  CHECK_THAT(file_error(ratio(3, 1, {"groups[0].afd.attention.tp=2"})),
             Catch::EndsWith("groups[0].afd.attention.workers: must be a multiple of afd.attention.tp (2): each "
                             "attention lane is tp workers, got 3"));
  CHECK_THAT(file_error({"groups[0].afd.ffn.workers=0"}),
             Catch::EndsWith("groups[0].afd.ffn.workers: must be 1 to 4096, got 0"));
  CHECK_THAT(file_error(ratio(1, 2, {"groups[0].afd.ffn.ep=1"})),
             Catch::EndsWith("groups[0].afd.ffn.ep: must equal afd.ffn.workers (2): the experts are sharded over "
                             "every FFN worker, got 1"));
  CHECK_THAT(file_error({"groups[0].afd.ffn.shards=2"}), Catch::Contains("groups[0].afd.ffn.shards: unknown key"));
  CHECK_THAT(file_error({"groups[0].afd.attention=2"}),
             Catch::EndsWith("groups[0].afd.attention: must be a mapping with workers (and tp)"));
  CHECK_THAT(file_error({"groups[0].device=cuda"}),
             Catch::EndsWith("groups[0].afd: attention-FFN disaggregation runs on CPU ranks only so far (device: "
                             "cuda)"));

  // What needs the model: the FFN workers against its experts and its MLP, the attention tp against its heads.
  test::TempDir tmp;
  const auto six = write_moe(tmp.path() / "six", "MixtralForCausalLM", R"("num_local_experts": 6, "num_experts_per_tok": 2)");
  auto refused = [](const TopologyConfig& cfg) {
    auto engine = Engine::start(cfg, test::engine_options());
    REQUIRE_FALSE(engine.ok());
    return engine.error().message;
  };
  CHECK_THAT(refused(dummy_topology(six, "configs/afd.yaml", ratio(1, 4))),
             Catch::EndsWith("groups[0].afd.ffn.workers: must divide the number of experts (6): each FFN worker holds "
                             "whole experts, got 4"));
  CHECK_THAT(refused(test::quickstart("configs/afd.yaml", ratio(1, 3))),
             Catch::EndsWith("groups[0].afd.ffn.workers: must divide intermediate_size (172): the dense MLPs are split "
                             "over the FFN workers, got 3"));
  CHECK_THAT(refused(test::quickstart("configs/afd.yaml", ratio(3, 1, {"groups[0].afd.attention.tp=3"}))),
             Catch::EndsWith("groups[0].afd.attention.tp: must divide num_attention_heads (8), got 3"));
}
