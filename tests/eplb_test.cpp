// EPLB through the engine: a Mixtral whose router sends nearly every token to experts 2 and 3 (both on ep rank 0 at
// first), served with ep 2, two redundant slots per rank and a rebalance every 4 steps: the scheduler copies the hot
// experts to rank 1, the ranks' load evens out (busiest / mean at most 1.15 after, 2 before), and the outputs are
// the same bits as without rebalancing.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "core/expert_placement.hpp"
#include "engine_test_util.hpp"
#include "safetensors_writer.hpp"

using namespace actord;

namespace {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

void write_safetensors(const std::filesystem::path& file, const std::map<std::string, Tensor>& tensors) {
  std::map<std::string, test::StoredTensor> stored;
  for (const auto& [name, t] : tensors) stored[name] = test::stored("F32", t.shape, t.values);
  test::write_safetensors(file, stored);
}

// Hidden 64, 2 layers, 8 heads / 2 KV heads, 8 experts of 128 top-2, vocab 512 (the stories260K tokenizer's).
// Every embedding has +1 in feature 0 and the MoE norm weighs it 20-fold, so the router's +1 / -1 in column 0 of
// experts 2 and 3 / the others routes nearly every token to experts 2 and 3.
std::filesystem::path write_skewed_mixtral(const std::filesystem::path& dir) {
  test::model_folder(dir,
                   R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
                       "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 128,
                       "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
                       "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32",
                       "bos_token_id": 1, "eos_token_id": 2, "num_local_experts": 8, "num_experts_per_tok": 2})");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto random = [&](std::vector<int64_t> shape) {
    Tensor t{shape, std::vector<float>(size_t(shape[0]) * size_t(shape.size() > 1 ? shape[1] : 1))};
    for (float& v : t.values) v = normal(rng);
    return t;
  };
  auto ones = [](int64_t n) { return Tensor{{n}, std::vector<float>(size_t(n), 1.0f)}; };
  std::map<std::string, Tensor> w;
  w["model.embed_tokens.weight"] = random({512, 64});
  for (int64_t v = 0; v < 512; ++v) w["model.embed_tokens.weight"].values[size_t(v * 64)] = 1.0f;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = ones(64);
    w[p + "self_attn.q_proj.weight"] = random({64, 64});
    w[p + "self_attn.k_proj.weight"] = random({16, 64});
    w[p + "self_attn.v_proj.weight"] = random({16, 64});
    w[p + "self_attn.o_proj.weight"] = random({64, 64});
    Tensor norm = ones(64);
    norm.values[0] = 20.0f;
    w[p + "post_attention_layernorm.weight"] = norm;
    Tensor gate = random({8, 64});
    for (int e = 0; e < 8; ++e) gate.values[size_t(e * 64)] = e == 2 || e == 3 ? 1.0f : -1.0f;
    w[p + "block_sparse_moe.gate.weight"] = gate;
    for (int e = 0; e < 8; ++e) {
      const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      w[x + "w1.weight"] = random({128, 64});
      w[x + "w2.weight"] = random({64, 128});
      w[x + "w3.weight"] = random({128, 64});
    }
  }
  w["model.norm.weight"] = ones(64);
  w["lm_head.weight"] = random({512, 64});
  write_safetensors(dir / "model.safetensors", w);
  return dir;
}

std::vector<GenerateRequest> requests(int count, int offset) {
  std::vector<GenerateRequest> out;
  for (int i = 0; i < count; ++i) {
    GenerateRequest r;
    r.prompt_ids = {1};
    for (int j = 0; j < 5 + i % 7; ++j) r.prompt_ids.push_back(3 + (i * 31 + j * 17 + offset) % 500);
    r.max_tokens = 24;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    r.sampling.logprobs = 1;
    out.push_back(std::move(r));
  }
  return out;
}

// Busiest ep rank over the mean in each MoE layer of `load` ([layer][expert] tokens), the worst layer.
double worst_rank_imbalance(const EngineStats& load, int slots) {
  double worst = 0;
  for (size_t layer = 0; (layer + 1) * 8 <= load.expert_tokens.size(); ++layer) {
    ExpertPlacement p;
    p.ep = 2;
    p.slots_per_rank = slots / 2;
    p.slot_expert.assign(load.expert_placement.begin() + ptrdiff_t(layer) * slots,
                         load.expert_placement.begin() + ptrdiff_t(layer + 1) * slots);
    const std::vector<uint64_t> tokens(load.expert_tokens.begin() + ptrdiff_t(layer * 8),
                                       load.expert_tokens.begin() + ptrdiff_t(layer * 8 + 8));
    worst = std::max(worst, rank_imbalance(tokens, p));
  }
  return worst;
}

}  // namespace

TEST_CASE("EPLB - a skewed router's hot experts are copied to the idle rank while serving - the load evens out - "
          "outputs unchanged - ep2 over tp2 and over two attention lanes", "[engine][ep][eplb]") {
  test::TempDir tmp;
  const auto dir = write_skewed_mixtral(tmp.path() / "skewed");
  // ep2 over the tp ranks of tp2.yaml, or over two attention lanes of one rank (quickstart.yaml + ep 2).
  auto topology = [&](const char* file, std::vector<std::string> set) {
    set.push_back("model.path=" + dir.string());
    set.push_back("groups[0].ep=2");
    set.push_back("groups[0].num_redundant_experts=2");
    return test::quickstart(file, set);
  };
  const auto first = requests(8, 0), second = requests(8, 100);
  for (const char* file : {"configs/tp2.yaml", "configs/quickstart.yaml"}) {
    // Without rebalancing: the initial placement (rank 0 holds experts 0-3 and copies of 4, 5; rank 1 4-7, 0, 1).
    std::vector<GenerateOutput> expected;
    {
      auto engine = test::start_engine(topology(file, {}));
      auto a = engine->generate(first);
      auto b = engine->generate(second);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      expected = *a;
      expected.insert(expected.end(), b->begin(), b->end());
      auto stats = engine->stats();
      REQUIRE(stats.ok());
      CHECK(stats->eplb_rebalances == 0);
      CHECK(worst_rank_imbalance(*stats, 12) > 1.9);  // experts 2 and 3 take nearly every token, all on rank 0
    }
    const bool lanes = std::string(file) == "configs/quickstart.yaml";
    for (const char* placement : {"thread", "process"}) {
      if (lanes && std::string(placement) == "thread") continue;  // the lanes' threads: the engine tests run them
      DYNAMIC_SECTION(file << " ep2, ranks as " << placement) {
        auto engine = test::start_engine(
            topology(file, {"groups[0].eplb_step_interval=4", std::string("groups[0].placement=") + placement}));
        auto a = engine->generate(first);
        REQUIRE(a.ok());
        const auto before = engine->stats();
        REQUIRE(before.ok());
        CHECK(before->eplb_rebalances >= 1);
        auto b = engine->generate(second);
        REQUIRE(b.ok());
        const auto after = engine->stats();
        REQUIRE(after.ok());
        // The second batch ran on the rebalanced placement: hot experts on both ranks.
        const EngineStats window = stats_between(*before, *after);
        const double imbalance = worst_rank_imbalance(window, 12);
        INFO("busiest / mean rank after rebalancing: " << imbalance);
        CHECK(imbalance <= 1.15);
        std::vector<GenerateOutput> got = *a;
        got.insert(got.end(), b->begin(), b->end());
        REQUIRE(got.size() == expected.size());
        for (size_t i = 0; i < got.size(); ++i) {
          INFO("request " << i);
          CHECK(got[i].generated_ids == expected[i].generated_ids);
          REQUIRE(got[i].logprobs.size() == expected[i].logprobs.size());
          for (size_t t = 0; t < got[i].logprobs.size(); ++t)
            CHECK(got[i].logprobs[t].logprob == expected[i].logprobs[t].logprob);  // the same bits
        }
      }
    }
  }
}
