// Quality of weight-only quantization on a real model: stories260K loaded with model.quantization int8 and int4
// (every multiplied matrix quantized at load), perplexity on a fixed text and greedy agreement with the f32 run,
// through both activation paths (f32 activations: portable, and avx2 / avx512 without VNNI; int8 activations per row
// where the CPU has AVX-VNNI or AVX512-VNNI).
//
// Stated bounds (stories260K, dim 64: small matrices lose more to 4 bits than large ones; the text below): int8 (per
// channel or groups of 32) within 2% of the f32 perplexity and at least 56 of the first 64 greedy tokens; int4 in
// groups of 32 within 25% (symmetric) or 15% (zero points) and at least 16 tokens. Measured values are printed
// (AMD EPYC: int8 -0.15 .. +0.6%, 61-64 tokens; int4 +18% / +10-11%, 27 / 38 tokens).
//
// The same for the KV cache (engine.kv_cache_dtype int8: codes with a scale per token and KV head, here rows of
// stories260K's head_dim 8, the hardest case for a row scale): within 1% of the f32 perplexity and at least 56 of 64
// greedy tokens on every ISA (Intel Xeon: bf16 -0.13%, int8 +0.22%, both 64/64).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>

#include "cpu_rank.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

namespace {

constexpr const char* kText =
    "Once upon a time, there was a little boy named Tom. He liked to play with his red ball in the garden. One day, "
    "the ball went over the fence. Tom was sad. His friend Sue came to help him. They looked and looked, and then "
    "they found the ball under a big tree. Tom said thank you to Sue, and they played together until the sun went "
    "down.";

struct Quality {
  double perplexity = 0;
  std::vector<int32_t> greedy;
};

Quality run(const QuantSpec& spec, cpu::Isa isa, DType kv_dtype = DType::f32) {
  test::CpuRank rank(2, isa);
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  ModelLoadOptions options = rank.load(test::stories_dir());
  options.quantization = spec;
  auto model = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE(model.ok());
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  const std::vector<int32_t> ids = tok->encode(kText);  // BOS first
  REQUIRE(ids.size() > 60);
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 64, 16, kv_dtype);
  std::vector<uint32_t> table(64);
  for (uint32_t i = 0; i < 64; ++i) table[i] = i;
  // Token by token: the log-probability of each next token of the text.
  double nll = 0;
  std::vector<float> logits;
  for (size_t pos = 0; pos + 1 < ids.size(); ++pos) {
    ForwardBatch batch;
    batch.tokens = {ids[pos]};
    batch.seqs = {SeqSlice{0, 1, static_cast<int32_t>(pos), table.data(), true}};
    REQUIRE((*model)->forward(batch, kv, logits, rank.backend));
    double max_logit = logits[0];
    for (int v = 0; v < cfg->vocab_size; ++v) max_logit = std::max(max_logit, double(logits[v]));
    double sum = 0;
    for (int v = 0; v < cfg->vocab_size; ++v) sum += std::exp(logits[v] - max_logit);
    nll -= logits[ids[pos + 1]] - max_logit - std::log(sum);
  }
  Quality q;
  q.perplexity = std::exp(nll / double(ids.size() - 1));
  KvCache kv2(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 64, 16, kv_dtype);
  q.greedy = test::greedy_from_bos(**model, kv2, rank.backend, table, 64);
  return q;
}

int agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int same = 0;
  while (same < static_cast<int>(std::min(a.size(), b.size())) && a[same] == b[same]) ++same;
  return same;
}

}  // namespace

TEST_CASE("stories260K quantized to int8 and int4 keeps its perplexity and greedy tokens within the stated bounds",
          "[quant][model]") {
  const Quality f32 = run(QuantSpec{}, cpu::Isa::automatic);
  std::printf("stories260K perplexity on the fixed text: f32 %.4f\n", f32.perplexity);
  const auto reference = test::reference_ids();
  REQUIRE(std::equal(f32.greedy.begin(), f32.greedy.end(), reference.begin()));
  std::vector<cpu::Isa> isas{cpu::Isa::portable};
  if (cpu::isa_for(cpu::Isa::avx2).ok()) isas.push_back(cpu::Isa::avx2);
  if (cpu::isa_for(cpu::Isa::avx512).ok()) isas.push_back(cpu::Isa::avx512);
  for (const auto& [spec, ppl_bound, min_agree] :
       {std::tuple{*make_quant_spec(QuantKind::int8, 0, false), 0.02, 56},
        std::tuple{*make_quant_spec(QuantKind::int8, 32, false), 0.02, 56},
        std::tuple{*make_quant_spec(QuantKind::int4, 32, false), 0.25, 16},
        std::tuple{*make_quant_spec(QuantKind::int4, 32, true), 0.15, 16}}) {
    for (cpu::Isa isa : isas) {
      const Quality q = run(spec, isa);
      const int agree = agreement(q.greedy, f32.greedy);
      cpu::WeightMatrix kind;  // what the dispatch reads: quantized codes of these bits
      kind.layout = cpu::WeightLayout::quantized;
      kind.quant.bits = spec.kind == QuantKind::int4 ? 4 : 8;
      const char* path = cpu::product_path_name(cpu::product_path(isa, 1, kind));
      std::printf("  %-28s %-9s %-18s perplexity %.4f (%+.2f%%), greedy agreement %d/64\n", describe(spec).c_str(),
                  cpu::isa_name(isa), path, q.perplexity, 100.0 * (q.perplexity / f32.perplexity - 1), agree);
      INFO(describe(spec) << " on " << cpu::isa_name(isa));
      CHECK(std::abs(q.perplexity / f32.perplexity - 1) <= ppl_bound);
      CHECK(agree >= min_agree);
    }
  }
}

TEST_CASE("stories260K decoding from an int8 KV cache keeps its perplexity and greedy tokens within the stated bounds",
          "[quant][model][kv]") {
  const Quality f32 = run(QuantSpec{}, cpu::Isa::automatic);
  std::vector<cpu::Isa> isas{cpu::Isa::portable};
  if (cpu::isa_for(cpu::Isa::avx2).ok()) isas.push_back(cpu::Isa::avx2);
  if (cpu::isa_for(cpu::Isa::avx512).ok()) isas.push_back(cpu::Isa::avx512);
  for (DType kv_dtype : {DType::bf16, DType::i8}) {
    for (cpu::Isa isa : isas) {
      const Quality q = run(QuantSpec{}, isa, kv_dtype);
      const int agree = agreement(q.greedy, f32.greedy);
      std::printf("  KV cache %-9s %-9s perplexity %.4f (%+.2f%%), greedy agreement %d/64\n", dtype_config_name(kv_dtype),
                  cpu::isa_name(isa), q.perplexity, 100.0 * (q.perplexity / f32.perplexity - 1), agree);
      INFO("KV cache " << dtype_config_name(kv_dtype) << " on " << cpu::isa_name(isa));
      CHECK(std::abs(q.perplexity / f32.perplexity - 1) <= 0.01);
      CHECK(agree >= 56);
    }
  }
}
