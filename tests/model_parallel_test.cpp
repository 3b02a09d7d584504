// Tensor and pipeline parallel forward passes equal the single-rank one: every rank of a tp x pp replica is a
// thread with its own shard, KV cache and in-process communicators, and the last stage's logits are compared with
// an unsharded model's over a prefill and 64 greedy decode steps of a batch (same token ids; each sequence's logits
// within 1e-5 of its largest logit). Models: stories260K (8 heads, 4 KV heads) and random-weight Llamas with GQA (8 query heads,
// 2 KV heads, so tp 4 replicates each KV head on two ranks), a ~56M one, and a Mixtral (experts split by TP).
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>

#include "comms/collectives/group_factory.hpp"
#include "cpu_rank.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

constexpr int kBlockSize = 16;

// The ranks of one replica as threads.
class Replica {
 public:
  // ep beyond tp: ep / tp attention lanes of tp x pp ranks each (lane-major), the experts over all of them.
  Replica(const ModelConfig& cfg, ModelLoadOptions options, int tp, int pp, int ep, int kv_blocks, int redundant = 0)
      : tp_(tp), pp_(pp), lanes_(ep > tp ? ep / tp : 1) {
    static uint64_t next_id = 1;
    for (int lane = 0; lane < lanes_; ++lane) {
      for (int s = 0; s < pp; ++s) {
        for (int k = 0; k < tp; ++k) {
          options.place = RankPlace{tp, pp, k, s, ep, redundant};
          options.place.lane = lane;
          Rank rank;
          rank.cpu = std::make_unique<test::CpuRank>(1);
          options.backend = &rank.cpu->backend;
          auto model = ModelRegistry::with_builtins().create(cfg, options);
          if (!model) FAIL(model.error().message);
          const KvShape shape = (*model)->kv_shape();
          rank.kv = std::make_unique<KvCache>(shape.num_layers, shape.num_kv_heads, shape.head_dim, kv_blocks,
                                              kBlockSize);
          rank.model = std::move(*model);
          ranks_.push_back(std::move(rank));
        }
      }
    }
    auto group = [&](const std::string& name, int size) {
      coll::GroupSpec spec;
      spec.name = name;
      spec.id = next_id++;
      spec.size = size;
      auto comms = coll::create_local_group(spec);
      if (!comms) FAIL(comms.error().message);
      return std::move(*comms);
    };
    for (int lane = 0; lane < lanes_; ++lane) {
      if (tp > 1) {
        for (int s = 0; s < pp; ++s) {
          auto comms = group("pp" + std::to_string(s) + "/tp", tp);
          for (int k = 0; k < tp; ++k) at(k, s, lane).tp = std::move(comms[static_cast<size_t>(k)]);
        }
      }
      if (pp > 1) {
        for (int k = 0; k < tp; ++k) {
          auto comms = group("tp" + std::to_string(k) + "/pipeline", pp);
          for (int s = 0; s < pp; ++s) at(k, s, lane).pipeline = std::move(comms[static_cast<size_t>(s)]);
        }
      }
    }
    if (lanes_ > 1) {
      auto comms = group("ep", ep);
      for (int r = 0; r < ep; ++r) ranks_[static_cast<size_t>(r)].ep = std::move(comms[static_cast<size_t>(r)]);
    }
  }

  // Runs the batch on every rank at once; the logits of the last stage, equal on each of its TP ranks.
  std::vector<float> forward(const ForwardBatch& batch) { return forward(std::vector<ForwardBatch>{batch}).front(); }

  // EPLB: every rank takes `placement` at once (the experts its slots gain come from their holders).
  void set_expert_placement(const std::vector<int32_t>& placement) {
    const std::vector<Status> results = on_every_rank([&](size_t, Rank& rank, const ForwardContext& context) {
      return rank.model->set_expert_placement(placement, context);
    });
    for (size_t r = 0; r < ranks_.size(); ++r) {
      INFO("rank " << r);
      REQUIRE(results[r].ok());
    }
  }

  // Attention lanes: lane i runs batches[i] (an empty one serves experts only); every lane's logits.
  std::vector<std::vector<float>> forward(const std::vector<ForwardBatch>& batches) {
    REQUIRE(static_cast<int>(batches.size()) == lanes_);
    int most = 0;
    for (const auto& b : batches) most = std::max(most, static_cast<int>(b.tokens.size()));
    const size_t per_lane = ranks_.size() / size_t(lanes_);
    std::vector<std::vector<float>> logits(ranks_.size());
    const std::vector<Status> results = on_every_rank([&](size_t r, Rank& rank, ForwardContext context) {
      context.lane_tokens = most;
      return rank.model->forward(batches[r / per_lane], *rank.kv, logits[r], context);
    });
    std::vector<std::vector<float>> out;
    for (int lane = 0; lane < lanes_; ++lane) {
      const size_t first = size_t(lane) * per_lane, last_stage = first + size_t((pp_ - 1) * tp_);
      for (size_t r = first; r < first + per_lane; ++r) {
        INFO("rank " << r);
        REQUIRE(results[r].ok());
        if (r >= last_stage) CHECK(logits[r] == logits[last_stage]);
        else CHECK(logits[r].empty());
      }
      out.push_back(logits[last_stage]);
    }
    return out;
  }

 private:
  struct Rank;
  // fn(rank index, rank, its context with its communicators) on every rank at once, each in a thread of its own.
  template <class F>
  std::vector<Status> on_every_rank(F&& fn) {
    std::vector<std::thread> threads;
    std::vector<Status> results(ranks_.size());
    for (size_t r = 0; r < ranks_.size(); ++r) {
      threads.emplace_back([&, r] {
        Rank& rank = ranks_[r];
        ForwardContext context(rank.cpu->backend);
        context.tp = rank.tp.get();
        context.pipeline = rank.pipeline.get();
        context.ep = rank.ep.get();
        results[r] = fn(r, rank, context);
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }
  struct Rank {
    std::unique_ptr<test::CpuRank> cpu;  // destroyed after the model loaded into it
    std::unique_ptr<Model> model;
    std::unique_ptr<KvCache> kv;
    std::unique_ptr<coll::Communicator> tp, pipeline, ep;
  };
  Rank& at(int k, int s, int lane = 0) { return ranks_[static_cast<size_t>((lane * pp_ + s) * tp_ + k)]; }
  int tp_, pp_, lanes_;
  std::vector<Rank> ranks_;
};

int argmax(const float* row, int n) { return static_cast<int>(std::max_element(row, row + n) - row); }

// Greedy decoding of `prompts` on one rank and on tp x pp ranks (ep beyond tp: ep / tp attention lanes of tp ranks,
// prompt i on lane i % lanes; a lane left without one serves its experts only), each sequence's logits compared
// step by step (within 1e-5 of its largest logit, the same greedy token). With `placement` (EPLB; `redundant`
// slots per rank) the sharded ranks take it after the prefill.
void check_against_one_rank(const ModelConfig& cfg, const ModelLoadOptions& options, int tp, int pp, int ep, int steps,
                            const std::vector<std::vector<int32_t>>& prompts, int redundant = 0,
                            const std::vector<int32_t>& placement = {}) {
  const int lanes = ep > tp ? ep / tp : 1, vocab = cfg.vocab_size;
  int blocks_per_seq = 0;
  for (const auto& p : prompts) blocks_per_seq = std::max(blocks_per_seq, (int(p.size()) + steps + kBlockSize) / kBlockSize);
  const int kv_blocks = blocks_per_seq * int(prompts.size());
  Replica single(cfg, options, 1, 1, 1, kv_blocks), sharded(cfg, options, tp, pp, ep, kv_blocks, redundant);
  std::vector<std::vector<uint32_t>> tables(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int b = 0; b < blocks_per_seq; ++b) tables[i].push_back(static_cast<uint32_t>(i * size_t(blocks_per_seq) + size_t(b)));
  std::vector<std::vector<int32_t>> next = prompts;
  std::vector<int32_t> positions(prompts.size(), 0);
  float worst = 0.0f;
  for (int step = 0; step <= steps; ++step) {
    ForwardBatch all;
    std::vector<ForwardBatch> per_lane(static_cast<size_t>(lanes));
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (ForwardBatch* b : {&all, &per_lane[i % size_t(lanes)]}) {
        b->seqs.push_back({static_cast<int32_t>(b->tokens.size()), static_cast<int32_t>(next[i].size()), positions[i],
                           tables[i].data(), true});
        b->tokens.insert(b->tokens.end(), next[i].begin(), next[i].end());
      }
    }
    const auto expected = single.forward(all);
    const auto got = sharded.forward(per_lane);
    REQUIRE(expected.size() == prompts.size() * size_t(vocab));
    for (size_t lane = 0; lane < size_t(lanes); ++lane) REQUIRE(got[lane].size() == per_lane[lane].seqs.size() * size_t(vocab));
    std::vector<size_t> row_in_lane(static_cast<size_t>(lanes), 0);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const size_t lane = i % size_t(lanes), row = row_in_lane[lane]++;
      const float* want = expected.data() + i * size_t(vocab);
      const float* have = got[lane].data() + row * size_t(vocab);
      float largest = 0.0f, diff = 0.0f;
      for (int v = 0; v < vocab; ++v) {
        largest = std::max(largest, std::fabs(want[v]));
        diff = std::max(diff, std::fabs(have[v] - want[v]));
      }
      INFO("step " << step << " sequence " << i << ": max |diff| " << diff << " of largest |logit| " << largest);
      CHECK(diff <= 1e-5f * largest);
      worst = std::max(worst, diff / largest);
      const int a = argmax(want, vocab), b = argmax(have, vocab);
      REQUIRE(a == b);
      positions[i] += static_cast<int32_t>(next[i].size());
      next[i] = {a};
    }
    if (step == 0 && !placement.empty()) sharded.set_expert_placement(placement);
  }
  WARN("tp " << tp << " x pp " << pp << " (ep " << ep << ", " << lanes << " lane" << (lanes > 1 ? "s" : "")
             << "): worst logit difference " << worst << " of the largest logit");
}

// The prompts of the tensor and pipeline parallel checks: three of different lengths as one batch.
void check_equivalent(const ModelConfig& cfg, const ModelLoadOptions& options, int tp, int pp, int steps, int ep = 1,
                      int redundant = 0, const std::vector<int32_t>& placement = {}) {
  check_against_one_rank(cfg, options, tp, pp, ep, steps,
                         {{1, 5, 9, 14, 3, 77}, {1, 200}, {1, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51}}, redundant,
                         placement);
}

// A random-weight Llama folder (config.json only; load_format dummy).
std::filesystem::path write_llama(const std::filesystem::path& dir, int hidden, int layers, int ff, int vocab,
                                  const std::string& architecture = "LlamaForCausalLM", const std::string& extra = "") {
  std::filesystem::create_directories(dir);
  test::write_file(dir / "config.json",
                   "{\"architectures\": [\"" + architecture + "\"], \"hidden_size\": " + std::to_string(hidden) +
                       ", \"num_hidden_layers\": " + std::to_string(layers) +
                       ", \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"intermediate_size\": " +
                       std::to_string(ff) + ", \"vocab_size\": " + std::to_string(vocab) +
                       ", \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, "
                       "\"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"" +
                       extra + "}");
  return dir;
}

// Qwen3-MoE: 8 experts of their own width, top-2 renormalised, layer 1 dense.
std::filesystem::path write_qwen3_moe(const std::filesystem::path& parent) {
  return write_llama(parent / "qwen3-moe", 128, 3, 256, 1000, "Qwen3MoeForCausalLM",
                     ", \"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64, "
                     "\"norm_topk_prob\": true, \"mlp_only_layers\": [1]");
}

// Qwen2-MoE: 4 experts top-2 and a shared expert.
std::filesystem::path write_qwen2_moe(const std::filesystem::path& parent) {
  return write_llama(parent / "qwen2-moe", 128, 2, 256, 1000, "Qwen2MoeForCausalLM",
                     ", \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
                     "\"shared_expert_intermediate_size\": 96");
}

// A Mixtral of 8 experts top-2, a Qwen3-MoE and a Qwen2-MoE folder under `parent`.
std::vector<std::filesystem::path> moe_folders(const std::filesystem::path& parent) {
  return {write_llama(parent / "mixtral", 128, 2, 256, 1000, "MixtralForCausalLM",
                      ", \"num_local_experts\": 8, \"num_experts_per_tok\": 2"),
          write_qwen3_moe(parent), write_qwen2_moe(parent)};
}

ModelLoadOptions dummy(const std::filesystem::path& dir) {
  ModelLoadOptions options;
  options.model_dir = dir;
  options.load_format = "dummy";
  options.seed = 11;
  return options;
}

}  // namespace

TEST_CASE("model parallel: stories260K sharded tp2, pp2, tp2 x pp2, tp4 equals one rank", "[model][parallel]") {
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  ModelLoadOptions options;
  options.model_dir = test::stories_dir();
  for (auto [tp, pp] : {std::pair{2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 5}}) {
    DYNAMIC_SECTION("tp " << tp << " pp " << pp) { check_equivalent(*cfg, options, tp, pp, 64); }
  }
}

TEST_CASE("model parallel: a ~56M GQA Llama (8 query heads, 2 KV heads) sharded equals one rank", "[model][parallel]") {
  test::TempDir tmp;
  const auto dir = write_llama(tmp.path() / "gqa", 512, 8, 1536, 32000);
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  for (auto [tp, pp] : {std::pair{2, 1}, {1, 2}, {2, 2}, {4, 1}}) {
    DYNAMIC_SECTION("tp " << tp << " pp " << pp) { check_equivalent(*cfg, dummy(dir), tp, pp, 64); }
  }
}

TEST_CASE("model parallel: a random Mixtral's experts split by TP equal one rank", "[model][parallel]") {
  test::TempDir tmp;
  const auto dir = write_llama(tmp.path() / "moe", 128, 2, 256, 1000, "MixtralForCausalLM",
                               ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2");
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  check_equivalent(*cfg, dummy(dir), 2, 1, 16);
}

TEST_CASE("model parallel: Qwen3 (q/k norms), Qwen3-MoE (experts of their own width, a dense layer), Qwen2-MoE "
          "(a shared expert), Gemma 3 (sandwich norms, scaled embeddings, local RoPE) and Gemma 2 (logit caps) sharded "
          "equal one rank",
          "[model][parallel]") {
  test::TempDir tmp;
  const auto qwen3 = write_llama(tmp.path() / "qwen3", 128, 2, 256, 1000, "Qwen3ForCausalLM", ", \"head_dim\": 32");
  const auto moe = write_qwen3_moe(tmp.path());
  const auto qwen2_moe = write_qwen2_moe(tmp.path());
  // Windows of 4 on layers 0 and 2 (pattern 2), shorter than the prompts.
  const auto gemma3 = write_llama(tmp.path() / "gemma3", 128, 3, 256, 1000, "Gemma3ForCausalLM",
                                  ", \"head_dim\": 32, \"sliding_window\": 4, \"sliding_window_pattern\": 2, "
                                  "\"query_pre_attn_scalar\": 24");
  // Gemma 2: capped scores and logits, the query scale on the queries themselves (no q/k norms).
  const auto gemma2 = write_llama(tmp.path() / "gemma2", 128, 3, 256, 1000, "Gemma2ForCausalLM",
                                  ", \"head_dim\": 32, \"sliding_window\": 4, \"query_pre_attn_scalar\": 24, "
                                  "\"attn_logit_softcapping\": 3.0, \"final_logit_softcapping\": 5.0");
  for (const auto& dir : {qwen3, moe, qwen2_moe, gemma3, gemma2}) {
    auto cfg = ModelConfig::load(dir);
    REQUIRE(cfg.ok());
    for (auto [tp, pp] : {std::pair{2, 1}, {1, 3}, {2, 3}}) {
      DYNAMIC_SECTION(dir.filename().string() << " tp " << tp << " pp " << pp) {
        if (pp <= cfg->num_layers) check_equivalent(*cfg, dummy(dir), tp, pp, 16);
      }
    }
  }
}

TEST_CASE("model parallel: Phi-3's fused qkv_proj and gate_up_proj split by TP and PP from real files equal one rank "
          "- partial rotary and LongRoPE included", "[model][parallel]") {
  // Safetensors with the fused tensors (the PyTorch reference's Phi-3 folders): each rank takes its heads' rows of
  // q, k and v and its rows of gate and up out of the fused tensors.
  test::TempDir tmp;
  const std::string script = (test::source_dir() / "tests/reference/hf_reference.py").string();
  for (const char* kind : {"phi3", "phi3-partial"}) {
    const auto dir = tmp.path() / kind;
    REQUIRE(std::system(("/usr/bin/python3 " + script + " make-model --kind " + kind + " --out " + dir.string() +
                         " > /dev/null").c_str()) == 0);
    auto cfg = ModelConfig::load(dir);
    REQUIRE(cfg.ok());
    ModelLoadOptions options;
    options.model_dir = dir;
    for (auto [tp, pp] : {std::pair{2, 1}, {1, 2}, {2, 2}}) {
      DYNAMIC_SECTION(kind << " tp " << tp << " pp " << pp) { check_equivalent(*cfg, options, tp, pp, 16); }
    }
  }
}

TEST_CASE("model parallel: experts sharded whole over the TP ranks (ep) equal one rank - Mixtral and Qwen3-MoE of 8 "
          "experts top-2 and Qwen2-MoE", "[model][parallel][ep]") {
  test::TempDir tmp;
  for (const auto& dir : moe_folders(tmp.path())) {
    auto cfg = ModelConfig::load(dir);
    REQUIRE(cfg.ok());
    for (auto [tp, pp] : {std::pair{2, 1}, {4, 1}, {2, 2}}) {
      DYNAMIC_SECTION(dir.filename().string() << " ep " << tp << " pp " << pp) {
        check_equivalent(*cfg, dummy(dir), tp, pp, 64, tp);
      }
    }
  }
}


TEST_CASE("model parallel: experts over attention data parallel lanes (ep beyond tp) equal one rank - lanes of one "
          "and two ranks and an idle lane", "[model][parallel][ep][lanes]") {
  test::TempDir tmp;
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 14, 3, 77}, {1, 200}, {1, 42, 43, 44, 45, 46, 47, 48}};
  for (const auto& dir : moe_folders(tmp.path())) {
    auto cfg = ModelConfig::load(dir);
    REQUIRE(cfg.ok());
    // ep 2 of tp 1 (two lanes), ep 4 of tp 2 (two lanes of two), ep 4 of tp 1 (four lanes, one idle).
    for (auto [tp, ep] : {std::pair{1, 2}, {2, 4}, {1, 4}}) {
      DYNAMIC_SECTION(dir.filename().string() << " tp " << tp << " ep " << ep) {
        check_against_one_rank(*cfg, dummy(dir), tp, 1, ep, 32, prompts);
      }
    }
  }
}

TEST_CASE("model parallel: a lane prefilling three micro-batches beside a short one equals one rank",
          "[model][parallel][ep][lanes]") {
  test::TempDir tmp;
  const auto mixtral = write_llama(tmp.path() / "mixtral", 128, 2, 256, 1000, "MixtralForCausalLM",
                                   ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2");
  auto cfg = ModelConfig::load(mixtral);
  REQUIRE(cfg.ok());
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 1100; ++i) long_prompt.push_back(1 + (i * 37) % 999);
  check_against_one_rank(*cfg, dummy(mixtral), 1, 1, 2, 4, {long_prompt, {1, 7, 8}});
}

TEST_CASE("expert placement: a new one moves experts between the ranks (over tp ranks and over lanes) while the "
          "logits stay those of one rank - a malformed one is refused whole - a model without EP refuses any",
          "[model][parallel][ep][eplb]") {
  test::TempDir tmp;
  const auto dir = write_llama(tmp.path() / "mixtral", 128, 2, 256, 1000, "MixtralForCausalLM",
                               ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2");
  auto cfg = ModelConfig::load(dir);
  REQUIRE(cfg.ok());
  // [layer][slot] for 2 layers of 2 ranks x 3 slots; at first rank 0 holds 0 1 +2, rank 1 2 3 +0. Rank 0 gains
  // expert 3 (from rank 1) and a second 1, rank 1 gains 1 (from rank 0); layer 1 shuffles every slot.
  const std::vector<int32_t> good = {0, 1, 3, 2, 3, 1, 3, 2, 1, 0, 1, 2};
  check_equivalent(*cfg, dummy(dir), 2, 1, 16, 2, 1, good);
  check_against_one_rank(*cfg, dummy(dir), 1, 1, 2, 16, {{1, 5, 9}, {1, 200, 7, 7}, {1, 42}}, 1, good);

  test::CpuRank rank(1);
  ModelLoadOptions options = dummy(dir);
  options.backend = &rank.backend;
  options.place = RankPlace{2, 1, 1, 0, 2, 1};  // tp rank 1 of ep 2, 3 slots: experts 2, 3 and a copy of 0
  auto model = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE(model.ok());
  const ForwardContext alone(rank.backend);
  auto refused = [&](std::vector<int32_t> p) {
    auto st = (*model)->set_expert_placement(p, alone);
    REQUIRE_FALSE(st.ok());
    return st.error().message;
  };
  CHECK(refused({0, 1, 2}) == "expert placement: 3 entries, the model needs 2 layers x 6 slots");
  CHECK(refused({0, 1, 2, 3, 2, 3, 1, 1, 0, 2, 3, 7}) == "expert placement: layer 1 names expert 7");
  CHECK(refused({0, 1, 2, 3, 2, 3, 1, 1, 1, 2, 2, 2}) == "expert placement: layer 1 leaves an expert without a slot");
  CHECK(refused(good) == "expert placement: EP rank 1 of 2 needs its EP communicator in the context");
  options.place = RankPlace{};
  auto plain = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE(plain.ok());
  CHECK((*plain)->set_expert_placement(good, alone).error().code == Errc::unsupported);
  // Attention lanes: a lane outside ep / tp is refused; a lane's rank needs its EP communicator.
  options.place = RankPlace{1, 1, 0, 0, 2};
  options.place.lane = 2;
  auto outside = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.error().message == "lane 2 is outside the 2 attention lanes of ep 2 / tp 1");
  options.place.lane = 1;
  auto lane = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE(lane.ok());
  const KvShape shape = (*lane)->kv_shape();
  KvCache kv(shape.num_layers, shape.num_kv_heads, shape.head_dim, 4, 16);
  const uint32_t table[] = {0};
  ForwardBatch batch;
  batch.tokens = {1, 2};
  batch.seqs.push_back({0, 2, 0, table, true});
  std::vector<float> logits;
  const Status without_ep = (*lane)->forward(batch, kv, logits, ForwardContext(rank.backend));
  REQUIRE_FALSE(without_ep.ok());
  CHECK(without_ep.error().message ==
        "forward: rank tp0.pp0 of tp 1 x pp 1 x ep 2 needs its TP, pipeline and EP communicators in the context");
}

TEST_CASE("model parallel: a shard that does not fit the model, or a rank without its communicators, is refused",
          "[model][parallel]") {
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  test::CpuRank rank(1);
  ModelLoadOptions options = rank.load(test::stories_dir());
  options.place = RankPlace{3, 1, 0, 0};
  auto bad = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::EndsWith("tp must divide num_attention_heads (8), got 3"));
  options.place = RankPlace{2, 1, 2, 0};
  bad = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message == "rank tp2.pp0 is outside tp 2 x pp 1");

  options.place = RankPlace{2, 1, 0, 0};
  auto model = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE(model.ok());
  const KvShape shape = (*model)->kv_shape();
  CHECK(shape.num_kv_heads == cfg->num_kv_heads / 2);
  KvCache kv(shape.num_layers, shape.num_kv_heads, shape.head_dim, 2, kBlockSize);
  std::vector<uint32_t> table{0, 1};
  ForwardBatch batch;
  batch.tokens = {1};
  batch.seqs = {SeqSlice{0, 1, 0, table.data(), true}};
  std::vector<float> logits;
  const Status alone = (*model)->forward(batch, kv, logits, rank.backend);
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.error().message == "forward: rank tp0.pp0 of tp 2 x pp 1 needs its TP and pipeline communicators in the context");
}
