// Every instruction set this CPU runs, forced through the topology (groups[i].cpu_isa), reproduces stories260K's
// 256-token greedy reference exactly through the whole engine, in one process and with the worker in its own
// process (the setting travels in WorkerInit). The forced kernels really run: kernels of different ISAs add in
// different orders, so the logits differ in their last bits from one ISA to another while the tokens stay the same.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "actors/engine.hpp"
#include "engine_test_util.hpp"
#include "executors/cpu/gemm.hpp"
#include "cpu_rank.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_registry.hpp"

using namespace actord;

namespace {

// Names of the ISAs this CPU runs (portable always), auto first.
std::vector<std::string> runnable_isa_names() {
  std::vector<std::string> names{"auto"};
  for (cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512_bf16, cpu::Isa::amx}) {
    if (cpu::isa_for(isa).ok()) names.push_back(cpu::isa_name(isa));
  }
  return names;
}

struct Greedy {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // of each generated id
};

Greedy greedy_256(const std::string& isa, const std::string& placement) {
  auto engine = test::start_engine(
      test::quickstart("configs/quickstart.yaml", {"groups[0].cpu_isa=" + isa, "groups[0].placement=" + placement}));
  GenerateRequest r;
  r.prompt_ids = {1};
  r.max_tokens = 256;
  r.sampling.temperature = 0.0f;
  r.sampling.logprobs = 0;
  auto out = engine->generate({r});
  REQUIRE(out.ok());
  REQUIRE_FALSE((*out)[0].error);
  Greedy g;
  g.ids = (*out)[0].generated_ids;
  for (const auto& lp : (*out)[0].logprobs) g.logprobs.push_back(lp.logprob);
  return g;
}

// Logits of stories260K after a 64-token prefill and one decode step, with the kernels of `isa`.
std::vector<float> model_logits(cpu::Isa isa) {
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  test::CpuRank rank(2, isa);
  auto model = ModelRegistry::with_builtins().create(*cfg, rank.load(test::stories_dir()));
  if (!model) FAIL(model.error().message);
  KvCache kv(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 8, 16);
  std::vector<uint32_t> table{3, 0, 6, 1, 7};
  const auto reference = test::reference_ids();
  std::vector<float> logits, all;
  ForwardBatch batch;
  batch.tokens = {1};
  batch.tokens.insert(batch.tokens.end(), reference.begin(), reference.begin() + 63);
  batch.seqs = {SeqSlice{0, 64, 0, table.data(), true}};
  REQUIRE((*model)->forward(batch, kv, logits, rank.backend));
  all = logits;
  batch.tokens = {reference[63]};
  batch.seqs = {SeqSlice{0, 1, 64, table.data(), true}};
  REQUIRE((*model)->forward(batch, kv, logits, rank.backend));
  all.insert(all.end(), logits.begin(), logits.end());
  return all;
}

}  // namespace

TEST_CASE("every ISA this CPU runs - forced by groups[0].cpu_isa - gives exactly the 256-token greedy reference",
          "[engine][isa]") {
  const auto names = runnable_isa_names();
  INFO("this CPU runs up to " << cpu::isa_name(cpu::detected_isa()));
  std::map<std::string, Greedy> runs;
  for (const std::string& isa : names) {
    INFO("cpu_isa " << isa);
    runs[isa] = greedy_256(isa, "thread");
    CHECK(runs[isa].ids == test::reference_ids());
    CHECK(runs[isa].logprobs.size() == 256);
  }
  // auto is the best ISA; portable (plain C++, no FMA) rounds differently from it wherever the CPU has more.
  CHECK(runs["auto"].logprobs == runs[cpu::isa_name(cpu::detected_isa())].logprobs);
  if (cpu::detected_isa() != cpu::Isa::portable) CHECK(runs["portable"].logprobs != runs["auto"].logprobs);
}

TEST_CASE("a worker process runs the ISA groups[0].cpu_isa names - it travels in WorkerInit",
          "[engine][process][isa]") {
  const Greedy in_process = greedy_256("portable", "thread");
  const Greedy worker_process = greedy_256("portable", "process");
  CHECK(worker_process.ids == test::reference_ids());
  CHECK(worker_process.logprobs == in_process.logprobs);  // the same kernels, bit for bit
  if (cpu::detected_isa() != cpu::Isa::portable) {
    CHECK(worker_process.logprobs != greedy_256("auto", "process").logprobs);
  }
}

TEST_CASE("the model runs the kernels of the ISA it is loaded with - each close to the others", "[model][isa]") {
  std::vector<std::pair<cpu::Isa, std::vector<float>>> runs;
  for (cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (cpu::isa_for(isa).ok()) runs.emplace_back(isa, model_logits(isa));
  }
  CHECK(model_logits(cpu::Isa::automatic) == runs.back().second);
  for (size_t i = 1; i < runs.size(); ++i) {
    INFO(cpu::isa_name(runs[i].first) << " against " << cpu::isa_name(runs[0].first));
    const auto& a = runs[0].second;
    const auto& b = runs[i].second;
    REQUIRE(a.size() == b.size());
    float max_diff = 0;
    for (size_t j = 0; j < a.size(); ++j) max_diff = std::max(max_diff, std::abs(a[j] - b[j]));
    CHECK(max_diff > 0.0f);   // another summation order: really other kernels
    CHECK(max_diff < 1e-3f);  // of logits up to ~17
  }
}

TEST_CASE("cpu_isa - an unknown name is refused by the topology - one the CPU lacks by the worker, naming the key",
          "[config][isa]") {
  TopologyOverrides o;
  o.set = {"groups[0].cpu_isa=sse4"};
  auto cfg = load_topology(test::source_dir() / "configs/quickstart.yaml", o);
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().message == (test::source_dir() / "configs/quickstart.yaml").string() +
                                   ": groups[0].cpu_isa: must be auto, portable, avx2, avx512, avx512_bf16 or amx, got 'sse4'");
  CHECK(test::quickstart("configs/quickstart.yaml", {}).groups[0].cpu_isa == "auto");

  // What a worker answers on CPUs of each level.
  CHECK(cpu::isa_for("auto", cpu::Isa::avx2).value() == cpu::Isa::avx2);
  CHECK(cpu::isa_for("portable", cpu::Isa::avx512).value() == cpu::Isa::portable);
  CHECK(cpu::isa_for("avx2", cpu::Isa::avx512).value() == cpu::Isa::avx2);
  CHECK(cpu::isa_for("avx512", cpu::Isa::avx2).error().message ==
        "instruction set avx512 is not available on this CPU (the best it runs is avx2; use auto, portable or avx2)");
  CHECK(cpu::isa_for("avx2", cpu::Isa::portable).error().message ==
        "instruction set avx2 is not available on this CPU (the best it runs is portable; use auto or portable)");
  CHECK(cpu::isa_for("sse4", cpu::Isa::avx2).error().message ==
        "unknown instruction set 'sse4' (known: auto, portable, avx2, avx512, avx512_bf16, amx)");
  CHECK_THAT(cpu::isa_for("avx512_bf16", cpu::Isa::avx2).error().message,
             Catch::StartsWith("instruction set avx512_bf16 is not available on this CPU (it lacks AVX512-BF16"));

  if (!cpu::amx_ready()) {
    CHECK_THAT(cpu::isa_for("amx", cpu::detected_isa()).error().message,
               Catch::StartsWith("instruction set amx is not available here (") &&
                   Catch::Contains(cpu::amx_status()));
  }

  // On a CPU without AVX-512 (or AVX2), the engine refuses to start with the worker's error.
  for (const char* isa : {"avx2", "avx512", "avx512_bf16"}) {
    if (cpu::isa_for(std::string_view(isa)).ok()) continue;
    auto engine = Engine::start(test::quickstart("configs/quickstart.yaml", {std::string("groups[0].cpu_isa=") + isa}),
                                test::engine_options());
    REQUIRE_FALSE(engine.ok());
    CHECK_THAT(engine.error().message, Catch::Contains("groups[].cpu_isa: instruction set " + std::string(isa) +
                                                       " is not available on this CPU"));
  }
}
