// Batch invariance of the CPU executor: a token's logits are bit for bit the same whether it is computed alone
// (decode), in one prefill, in prefill chunks of any size and offset (chunked prefill, recompute after a
// preemption) or beside other sequences in the same step, for every instruction set this CPU runs and each KV
// dtype. This is what lets a request's output under continuous batching and preemption equal its solo run.
#include <catch2/catch.hpp>
#include <cstring>

#include "cpu_rank.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

struct Run {
  ModelConfig cfg = *ModelConfig::load(test::stories_dir());
  test::CpuRank rank;
  std::unique_ptr<Model> model;
  DType kv_dtype;
  Run(cpu::Isa isa, DType dtype) : rank(2, isa), kv_dtype(dtype) {
    auto created = ModelRegistry::with_builtins().create(cfg, rank.load(test::stories_dir()));
    REQUIRE(created.ok());
    model = std::move(*created);
  }
  std::unique_ptr<KvCache> kv() const {
    return std::make_unique<KvCache>(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, 32, 16, kv_dtype);
  }
  size_t vocab() const { return static_cast<size_t>(cfg.vocab_size); }
};

// The logits of every position of `tokens`, computed in chunks of `chunk` tokens (1: decode) at `table`.
std::vector<float> logits_in_chunks(Run& run, const std::vector<int32_t>& tokens, int chunk,
                                    const std::vector<uint32_t>& table) {
  auto kv = run.kv();
  std::vector<float> all, logits;
  for (size_t first = 0; first < tokens.size(); first += size_t(chunk)) {
    const size_t n = std::min(tokens.size() - first, size_t(chunk));
    ForwardBatch batch;
    batch.tokens.assign(tokens.begin() + ptrdiff_t(first), tokens.begin() + ptrdiff_t(first + n));
    SeqSlice s{0, int32_t(n), int32_t(first), table.data(), true};
    s.logit_rows = s.num_tokens;
    batch.seqs = {s};
    REQUIRE(run.model->forward(batch, *kv, logits, run.rank.backend));
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace

TEST_CASE("batch invariance - a token's logits are the same bits alone - in any prefill chunking - beside others",
          "[model][batch_invariance]") {
  std::vector<int32_t> tokens{1};
  for (int i = 0; i < 120; ++i) tokens.push_back(3 + (i * 37) % 500);
  std::vector<uint32_t> table(16), other_table(16);
  for (uint32_t i = 0; i < 16; ++i) {
    table[i] = 31 - 2 * i;  // scattered, and apart from the other sequence's
    other_table[i] = 30 - 2 * i;
  }
  for (cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (!cpu::isa_for(isa).ok()) continue;
    for (DType dtype : {DType::f32, DType::bf16}) {
      INFO("isa " << cpu::isa_name(isa) << ", kv " << dtype_name(dtype));
      Run run(isa, dtype);
      const auto decoded = logits_in_chunks(run, tokens, 1, table);
      for (int chunk : {7, 16, 33, 121}) {
        INFO("prefill chunks of " << chunk);
        const auto chunked = logits_in_chunks(run, tokens, chunk, table);
        REQUIRE(chunked.size() == decoded.size());
        CHECK(std::memcmp(chunked.data(), decoded.data(), sizeof(float) * decoded.size()) == 0);
      }
      // Beside another sequence: its 40-token prefill, then the token at position 80 decoded in the same step.
      auto kv = run.kv();
      std::vector<float> logits;
      ForwardBatch prefix;
      prefix.tokens.assign(tokens.begin(), tokens.begin() + 80);
      prefix.seqs = {SeqSlice{0, 80, 0, table.data(), false}};
      REQUIRE(run.model->forward(prefix, *kv, logits, run.rank.backend));
      ForwardBatch mixed;
      mixed.tokens.assign(tokens.begin() + 40, tokens.begin() + 80);  // the other sequence: a different prompt
      mixed.tokens.push_back(tokens[80]);
      mixed.seqs = {SeqSlice{0, 40, 0, other_table.data(), true}, SeqSlice{40, 1, 80, table.data(), true}};
      REQUIRE(run.model->forward(mixed, *kv, logits, run.rank.backend));
      REQUIRE(logits.size() == 2 * run.vocab());
      CHECK(std::memcmp(logits.data() + run.vocab(), decoded.data() + 80 * run.vocab(), sizeof(float) * run.vocab()) ==
            0);
    }
  }
}
