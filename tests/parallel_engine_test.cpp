// Tensor x pipeline parallel replicas through the whole engine: the bundled topologies tp2, pp2, tp2-pp2, dp2 and
// dp2-tp2, with
// their ranks as threads of the engine and as worker processes (shared-memory collectives), give the same greedy
// tokens as one worker for a batch of prompts over 64 tokens (a request with a repetition penalty and one with
// logprobs among them: the driver rank keeps the penalty history and samples); the same for a random-weight ~50M
// Llama with GQA (8 query heads, 2 KV heads). Also: a rank that fails to load stops the whole replica with its
// error, and a killed follower rank has its whole replica rebuilt while its request continues, unchanged.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "comms/collectives/shm_segment.hpp"
#include "parallel_test_util.hpp"

using namespace actord;
using actord::test::batch;
using actord::test::check_same;
using actord::test::dummy_topology;
using actord::test::run;
using actord::test::write_mixtral;
using actord::test::write_moe;


TEST_CASE("parallel engine: stories260K tp2, pp2, tp2-pp2, dp2, dp2-tp2 in threads and processes equal one worker",
          "[engine][parallel]") {
  const auto requests = batch(true);
  const auto expected = run(test::quickstart(), requests);
  for (const char* file : {"configs/tp2.yaml", "configs/pp2.yaml", "configs/tp2-pp2.yaml", "configs/dp2.yaml",
                           "configs/dp2-tp2.yaml"}) {
    for (const char* placement : {"thread", "process"}) {
      DYNAMIC_SECTION(file << " placement " << placement) {
        check_same(expected, run(test::quickstart(file, {std::string("groups[0].placement=") + placement}), requests));
      }
    }
  }
}

TEST_CASE("parallel engine: a random ~50M GQA Llama in tp2, pp2, tp2 x pp2, dp2, dp2 x tp2 equals one worker",
          "[engine][parallel]") {
  test::TempDir tmp;
  // The stories260K tokenizer (512 ids) serves the random model's vocabulary of 512.
  const auto dir = test::model_folder(tmp.path() / "gqa50m",
                   R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 16,
                       "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 1536,
                       "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
                       "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32",
                       "bos_token_id": 1, "eos_token_id": 2})");
  const auto requests = batch(false);
  const auto expected = run(dummy_topology(dir, "configs/quickstart.yaml", {}), requests);
  for (auto [file, placement] : {std::pair{"configs/tp2.yaml", "thread"}, {"configs/pp2.yaml", "process"},
                                 {"configs/tp2-pp2.yaml", "process"}, {"configs/dp2.yaml", "process"},
                                 {"configs/dp2-tp2.yaml", "thread"}}) {
    DYNAMIC_SECTION(file << " placement " << placement) {
      check_same(expected, run(dummy_topology(dir, file, {std::string("groups[0].placement=") + placement}), requests));
    }
  }
}

TEST_CASE("parallel engine: a rank that cannot load its shard stops the replica with its error", "[engine][parallel]") {
  test::TempDir tmp;
  const auto dir = test::copy_stories(tmp.path());
  // A damaged weight file: every rank fails to load; the first error comes back and nothing keeps running.
  std::filesystem::resize_file(dir / "model.safetensors", 1000);
  for (const char* placement : {"thread", "process"}) {
    DYNAMIC_SECTION("placement " << placement) {
      auto cfg = test::quickstart("configs/tp2-pp2.yaml",
                                  {"model.path=" + dir.string(), std::string("groups[0].placement=") + placement});
      auto engine = Engine::start(cfg, test::engine_options());
      REQUIRE_FALSE(engine.ok());
      CHECK_THAT(engine.error().message, Catch::Contains("model.safetensors"));
    }
  }
}

TEST_CASE("parallel engine: a follower rank killed mid-run - the replica is rebuilt and the request completes",
          "[engine][parallel][failure]") {
  auto engine = test::start_engine(test::quickstart("configs/tp2-pp2.yaml", {"groups[0].placement=process"}));
  GenerateRequest r;
  r.prompt_ids = {1};
  r.max_tokens = 300;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  // Tp rank 1 of the first stage (not the driver) is killed once the first text arrives; the request has hundreds
  // of steps to go. Its peers notice through their shared-memory groups, the whole replica is rebuilt, and the
  // request continues from its tokens so far.
  test::check_rank_kill_recovers(engine, {r}, "replica/0/worker/tp1.pp0", 4);
}

TEST_CASE("parallel engine: segments left under the names an earlier engine of this process gave its groups do not "
          "stop the next engine's shared memory groups",
          "[engine][parallel][failure]") {
  // What an earlier engine's killed ranks can leave behind for a moment: segments named after this process and the
  // first group ids. A new engine's groups must not meet them (each engine draws its ids afresh).
  std::vector<coll::ShmSegment> left;
  for (int id = 1; id <= 16; ++id) {
    auto segment = coll::ShmSegment::create("/actord-coll-" + std::to_string(getpid()) + "-" + std::to_string(id), 4096);
    REQUIRE(segment.ok());
    left.push_back(std::move(*segment));
  }
  const auto requests = batch(true);
  const auto expected = run(test::quickstart("configs/quickstart.yaml"), requests);
  check_same(expected, run(test::quickstart("configs/tp2.yaml", {"groups[0].placement=process"}), requests));
  for (auto& segment : left) segment.unlink();
}

TEST_CASE("parallel engine: random Mixtral and Qwen3-MoE of 8 experts top-2 with ep2 over tp2, over two attention "
          "data parallel lanes, and ep4 over two lanes of tp2, in threads and processes, equal one worker",
          "[engine][parallel][ep][lanes]") {
  test::TempDir tmp;
  const auto mixtral = write_mixtral(tmp.path() / "mixtral");
  const auto qwen3_moe = write_moe(tmp.path() / "qwen3-moe", "Qwen3MoeForCausalLM",
                                   R"("num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                                      "norm_topk_prob": true)");
  const auto requests = batch(false);
  struct Layout {
    const char* file;
    std::vector<std::string> set;
  };
  const std::vector<Layout> layouts = {
      {"configs/tp2.yaml", {"groups[0].ep=2", "groups[0].placement=thread"}},
      {"configs/tp2.yaml", {"groups[0].ep=2", "groups[0].placement=process"}},
      {"configs/quickstart.yaml", {"groups[0].ep=2", "groups[0].placement=thread"}},  // two lanes of one rank
      {"configs/quickstart.yaml", {"groups[0].ep=2", "groups[0].placement=process"}},
      {"configs/tp2.yaml", {"groups[0].ep=4", "groups[0].oversubscribe=true"}},  // two lanes of tp2, processes
  };
  for (const auto& dir : {mixtral, qwen3_moe}) {
    const auto expected = run(dummy_topology(dir, "configs/quickstart.yaml", {}), requests);
    for (const Layout& layout : layouts) {
      DYNAMIC_SECTION(dir.filename().string() << " " << layout.file << " " << layout.set[0] << " " << layout.set[1]) {
        check_same(expected, run(dummy_topology(dir, layout.file, layout.set), requests));
      }
    }
  }
  // One request at a time: the other lane is idle in every step and serves its experts only.
  SECTION("one request after another, the other lane idle") {
    auto engine = test::start_engine(dummy_topology(mixtral, "configs/quickstart.yaml", {"groups[0].ep=2"}));
    const auto single = run(dummy_topology(mixtral, "configs/quickstart.yaml", {}), {requests[2]});
    for (int i = 0; i < 2; ++i) {
      auto out = engine->generate({requests[2]});
      REQUIRE(out.ok());
      check_same(single, *out);
    }
  }
}

TEST_CASE("parallel engine: a lane's rank killed mid-run - the replica is rebuilt and both lanes' requests complete "
          "unchanged", "[engine][parallel][ep][lanes][failure]") {
  test::TempDir tmp;
  const auto mixtral = write_mixtral(tmp.path() / "mixtral");
  auto engine = test::start_engine(
      dummy_topology(mixtral, "configs/quickstart.yaml", {"groups[0].ep=2", "groups[0].placement=process"}));
  std::vector<GenerateRequest> requests = batch(false);
  requests.resize(2);  // one on each lane
  for (auto& r : requests) r.max_tokens = 200;
  test::check_rank_kill_recovers(engine, requests, "replica/0/worker/dp1.tp0.pp0", 2);
}

TEST_CASE("parallel engine: ep on a dense model, ep not a multiple of tp, lanes with pp, ep not dividing the experts are refused before "
          "anything starts", "[engine][parallel][ep]") {
  test::TempDir tmp;
  const auto six = write_moe(tmp.path() / "six", "MixtralForCausalLM",
                             R"("num_local_experts": 6, "num_experts_per_tok": 2)");
  auto refused = [](const TopologyConfig& cfg) {
    auto engine = Engine::start(cfg, test::engine_options());
    REQUIRE_FALSE(engine.ok());
    return engine.error().message;
  };
  CHECK_THAT(refused(test::quickstart("configs/tp2.yaml", {"groups[0].ep=2"})),
             Catch::EndsWith("groups[0].ep: needs a mixture-of-experts model (num_local_experts or num_experts in "
                             "config.json); this one is dense, got 2"));
  CHECK_THAT(refused(dummy_topology(six, "configs/tp2.yaml", {"groups[0].tp=4", "groups[0].ep=4",
                                                            "groups[0].oversubscribe=true"})),
             Catch::EndsWith("groups[0].ep: must divide the number of experts (6), got 4"));
  // Too little memory for the ranks' experts (with the rest of their shards and KV pools): refused before any rank
  // loads anything.
  EngineOptions small = test::engine_options();
  small.available_memory = 4ull << 20;
  for (const char* file : {"configs/tp2.yaml", "configs/quickstart.yaml"}) {
    auto tight = Engine::start(dummy_topology(six, file, {"groups[0].ep=2", "engine.kv_cache_memory=1MiB"}), small);
    REQUIRE_FALSE(tight.ok());
    CHECK(tight.error().code == Errc::resource_exhausted);
    CHECK_THAT(tight.error().message, Catch::Contains("model.path: the model's weights take"));
  }
  // ep not a multiple of tp, or lanes with pipeline stages: the topology file itself is refused.
  TopologyOverrides o;
  o.set = {"groups[0].ep=3"};
  auto bad = load_topology(test::source_dir() / "configs/tp2.yaml", o);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message,
             Catch::EndsWith("configs/tp2.yaml: groups[0].ep: must be 1 or a multiple of tp (2): the experts are "
                             "sharded over a stage's tp ranks, or over ep / tp attention data parallel lanes of tp "
                             "ranks, got 3"));
  o.set = {"groups[0].ep=4"};
  bad = load_topology(test::source_dir() / "configs/tp2-pp2.yaml", o);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::EndsWith("configs/tp2-pp2.yaml: groups[0].ep: beyond tp (attention data "
                                                  "parallel lanes) needs pp 1, got pp 2"));
}

TEST_CASE("expert load - every token fed is counted once per MoE layer for each of its top-2 experts - one rank, "
          "ep2, ep2 over two lanes, tp2 x pp2", "[engine][parallel][ep][stats]") {
  test::TempDir tmp;
  const auto dir = write_mixtral(tmp.path() / "mixtral");
  for (auto [file, set] : {std::pair{"configs/quickstart.yaml", std::vector<std::string>{}},
                           {"configs/tp2.yaml", {"groups[0].ep=2"}},
                           {"configs/quickstart.yaml", {"groups[0].ep=2"}},
                           {"configs/tp2-pp2.yaml", {}}}) {
    DYNAMIC_SECTION(file << (set.empty() ? "" : " ep2")) {
      auto engine = test::start_engine(dummy_topology(dir, file, set));
      auto out = engine->generate(batch(false));
      REQUIRE(out.ok());
      auto stats = engine->stats();
      REQUIRE(stats.ok());
      CHECK(stats->num_experts == 8);
      REQUIRE(stats->expert_tokens.size() == 4 * 8);
      for (int layer = 0; layer < 4; ++layer) {
        INFO("layer " << layer);
        uint64_t routed = 0;
        for (int e = 0; e < 8; ++e) routed += stats->expert_tokens[size_t(layer * 8 + e)];
        CHECK(routed == 2 * stats->tokens);
      }
    }
  }
}

TEST_CASE("parallel engine: a modelled link (groups[].link) slows tp2's collectives by its latency and changes no "
          "token", "[engine][parallel][link_model]") {
  std::vector<GenerateRequest> requests = batch(true);
  requests.resize(2);
  for (auto& r : requests) r.max_tokens = 16;
  const auto expected = run(test::quickstart("configs/tp2.yaml", {"groups[0].placement=thread"}), requests);
  auto engine = test::start_engine(
      test::quickstart("configs/tp2.yaml", {"groups[0].placement=thread", "groups[0].link={latency: 1ms}"}));
  auto got = engine->generate(requests);
  REQUIRE(got.ok());
  for (size_t i = 0; i < requests.size(); ++i) CHECK((*got)[i].generated_ids == expected[i].generated_ids);
  auto stats = engine->stats();
  REQUIRE(stats.ok());
  REQUIRE(stats->steps > 0);
  // A step of stories260K's 5 layers at tp2 makes 12 collectives at least (embedding, 2 per layer, logits).
  const double comm_ms_per_step = double(stats->worker_comm_us) / double(stats->steps) / 1000.0;
  INFO("collectives per step: " << comm_ms_per_step << " ms");
  CHECK(comm_ms_per_step >= 12.0);
}

TEST_CASE("parallel engine: greedy-only steps pick tokens from each TP rank's vocabulary shard - tp2 and tp2 x pp2 "
          "in processes and threads and tp2 with tbo equal one worker", "[engine][parallel]") {
  // Plain greedy rows (no penalties, logprobs or masks): each rank's best of each row is exchanged instead of its
  // logits (ForwardContext::row_bests). One request with min_tokens keeps its stop id masked for 8 tokens: the
  // steps before that gather whole rows, the ones after do not.
  auto requests = batch(true);
  requests[1].sampling.repetition_penalty = 1.0f;
  requests[2].sampling.logprobs = -1;
  requests[3].sampling.min_tokens = 8;
  requests[3].ignore_eos = false;
  const auto expected = run(test::quickstart(), requests);
  for (const auto& [file, set] : std::vector<std::pair<const char*, std::vector<std::string>>>{
           {"configs/tp2.yaml", {"groups[0].placement=process"}},
           {"configs/tp2.yaml", {"groups[0].placement=thread"}},
           {"configs/tp2-pp2.yaml", {"groups[0].placement=process"}},
           {"configs/tp2.yaml", {"groups[0].placement=process", "groups[0].tbo=true"}}}) {
    DYNAMIC_SECTION(file << " " << set.back()) {
      const auto got = run(test::quickstart(file, set), requests);
      REQUIRE(got.size() == expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("request " << i);
        REQUIRE_FALSE(got[i].error.has_value());
        CHECK(got[i].generated_ids == expected[i].generated_ids);
      }
    }
  }
}

TEST_CASE("parallel engine: two-batch overlap (groups[].tbo) gives the tokens and logprobs of one batch - tp2, pp2, "
          "tp2 x pp2 in threads and processes, three and four micro-batches, ep2 over tp2", "[engine][parallel][tbo]") {
  const auto requests = batch(true);
  const auto expected = run(test::quickstart(), requests);
  struct Layout {
    const char* file;
    const char* placement;
  };
  for (const Layout& layout : {Layout{"configs/tp2.yaml", "thread"}, Layout{"configs/tp2.yaml", "process"},
                               Layout{"configs/pp2.yaml", "process"}, Layout{"configs/tp2-pp2.yaml", "thread"},
                               Layout{"configs/tp2-pp2.yaml", "process"}}) {
    DYNAMIC_SECTION(layout.file << " " << layout.placement) {
      check_same(expected, run(test::quickstart(layout.file, {"groups[0].tbo=true", std::string("groups[0].placement=") +
                                                                                       layout.placement}),
                               requests));
    }
  }
  SECTION("tbo auto (steps cut or not as measured) - tp2 in processes and ep2 lanes of a random Mixtral") {
    check_same(expected, run(test::quickstart("configs/tp2.yaml", {"groups[0].tbo=auto", "groups[0].placement=process"}),
                             requests));
    test::TempDir tmp;
    const auto mixtral = write_mixtral(tmp.path() / "mixtral");
    const auto ids = batch(false);
    check_same(run(dummy_topology(mixtral, "configs/quickstart.yaml", {}), ids),
               run(dummy_topology(mixtral, "configs/tp2.yaml", {"groups[0].tp=1", "groups[0].ep=2", "groups[0].tbo=auto"}),
                   ids));
  }
  SECTION("three and four micro-batches (groups[].micro_batches), tp2 x pp2 in processes and tp2 in threads") {
    check_same(expected, run(test::quickstart("configs/tp2-pp2.yaml", {"groups[0].tbo=true", "groups[0].micro_batches=3",
                                                                       "groups[0].placement=process"}),
                             requests));
    check_same(expected, run(test::quickstart("configs/tp2.yaml", {"groups[0].tbo=true", "groups[0].micro_batches=4",
                                                                   "groups[0].placement=thread"}),
                             requests));
  }
  SECTION("ep2 over tp2, a random Mixtral") {
    test::TempDir tmp;
    const auto mixtral = write_mixtral(tmp.path() / "mixtral");
    const auto ids = batch(false);
    check_same(run(dummy_topology(mixtral, "configs/quickstart.yaml", {}), ids),
               run(dummy_topology(mixtral, "configs/tp2.yaml", {"groups[0].ep=2", "groups[0].tbo=true"}), ids));
  }
}
