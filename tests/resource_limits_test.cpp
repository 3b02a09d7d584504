// Memory asked of the machine is checked before anything is allocated, with an error that says how much was asked,
// how much is there and which key to change; an allocation that still fails is reported as out of memory under its
// key; durations and sizes read from users are refused rather than wrapped.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "core/host_memory.hpp"
#include "cli_util.hpp"
#include "engine_test_util.hpp"
#include "memory/memory_budget.hpp"
#include "plugins/model_config.hpp"
#include "plugins/model_footprint.hpp"

using namespace actord;

TEST_CASE("the memory budget names the key that does not fit", "[memory][limits]") {
  const uint64_t GiB = 1ull << 30;
  CHECK(check_memory_fits({1 * GiB, 2 * GiB, 3 * GiB}, 6 * GiB, "t.yaml: ").ok());
  CHECK(check_memory_fits({7 * GiB, 0, 0}, 6 * GiB, "t.yaml: ").error().message ==
        "t.yaml: model.path: the model's weights take 7.00 GiB, but this machine has only 6.00 GiB available; use a "
        "smaller model or a narrower model.dtype");
  const auto kv = check_memory_fits({1 * GiB, 10000 * GiB, 0}, 6 * GiB, "t.yaml: ");
  CHECK(kv.error().code == Errc::resource_exhausted);
  CHECK(kv.error().message ==
        "t.yaml: engine.kv_cache_memory: the KV cache asks for 9.77 TiB (beside 1.00 GiB of weights), but this "
        "machine has only 6.00 GiB available; lower engine.kv_cache_memory to at most 5.00 GiB");
  CHECK(check_memory_fits({1 * GiB, 2 * GiB, 4 * GiB}, 6 * GiB, "").error().message ==
        "engine.swap_space: the swap space asks for 4.00 GiB (beside 1.00 GiB of weights and 2.00 GiB of KV cache), "
        "but this machine has only 6.00 GiB available; lower engine.swap_space to at most 3.00 GiB");
  // Sums that would wrap around 64 bits do not fit either.
  CHECK_FALSE(check_memory_fits({UINT64_MAX - 1, UINT64_MAX - 1, UINT64_MAX - 1}, UINT64_MAX - 1, "").ok());
}

TEST_CASE("the weight estimate follows the shape and saturates", "[memory][limits]") {
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  // stories260K: the checkpoint holds ~260K parameters (tied embedding), in f32.
  const uint64_t params = estimated_num_parameters(*cfg);
  CHECK(params > 250000);
  CHECK(params < 300000);
  CHECK(estimated_weight_bytes(*cfg, DType::bf16) == 2 * params);
  ModelConfig huge = *cfg;
  huge.hidden_size = huge.intermediate_size = huge.vocab_size = INT32_MAX;
  huge.num_layers = huge.num_experts = INT32_MAX;
  CHECK(estimated_weight_bytes(huge, DType::f32) == UINT64_MAX);
}

TEST_CASE("a KV cache larger than the machine is refused at start, quickly, naming the key", "[memory][limits]") {
  for (const char* file : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    INFO(file);
    const auto t0 = std::chrono::steady_clock::now();
    auto engine = Engine::start(test::quickstart(file, {"engine.kv_cache_memory=10000GiB"}), test::engine_options());
    REQUIRE_FALSE(engine.ok());
    CHECK(engine.error().code == Errc::resource_exhausted);
    CHECK_THAT(engine.error().message, Catch::Contains("engine.kv_cache_memory: the KV cache asks for 9.77 TiB") &&
                                           Catch::Contains("available; lower engine.kv_cache_memory to at most"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // nothing was allocated
  }
  // The swap space is counted too, and the limit can be given (what a cgroup or a co-tenant leaves).
  EngineOptions small = test::engine_options();
  small.available_memory = 256ull << 20;  // the quickstart KV pool takes 64 MiB
  auto swap = Engine::start(test::quickstart("configs/quickstart.yaml",
                                             {"engine.preemption_mode=swap", "engine.swap_space=1GiB"}),
                            small);
  REQUIRE_FALSE(swap.ok());
  CHECK_THAT(swap.error().message, Catch::Contains("engine.swap_space: the swap space asks for 1023.98 MiB"));
  small.available_memory = 512ull << 10;
  auto weights = Engine::start(test::quickstart(), small);
  REQUIRE_FALSE(weights.ok());
  CHECK_THAT(weights.error().message, Catch::Contains("model.path: the model's weights take"));
  // A GPU group's weights and KV pool live in device memory: only its host swap space is held to host memory.
  const MemoryAsk ask{10ull << 30, 20ull << 30, 1ull << 30};
  CHECK(in_host_memory(ask, "cpu").kv == ask.kv);
  const MemoryAsk gpu = in_host_memory(ask, "cuda");
  CHECK((gpu.weights == 0 && gpu.kv == 0 && gpu.swap == ask.swap));
  CHECK(check_memory_fits(gpu, 2ull << 30, "t.yaml: ").ok());
  CHECK_FALSE(check_memory_fits(in_host_memory(ask, "cpu"), 2ull << 30, "t.yaml: ").ok());
}

namespace {

// actord with `args` in a shell whose address space is capped at `kib` KiB (`ulimit -v`); its exit code and stderr.
test::RunResult run_with_address_space(uint64_t kib, const std::string& args) {
  test::TempDir tmp;
  const std::string cmd = "ulimit -v " + std::to_string(kib) + "; cd " + test::shell_quote(test::source_dir()) +
                          " && " + test::shell_quote(test::actord_binary()) + " " + args + " >/dev/null 2>" +
                          test::shell_quote((tmp.path() / "err").string()) + " </dev/null";
  const int status = std::system(("sh -c " + test::shell_quote(cmd)).c_str());
  test::RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(tmp.path() / "err");
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return r;
}

}  // namespace

TEST_CASE("huge sizes and indices from the command line are one clear line and exit 2", "[memory][limits][cli]") {
  auto gen = [](const std::string& set) {
    return test::run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1", "--max-tokens", "4", "--set",
                             set});
  };
  auto wrap = gen("engine.kv_cache_memory=99999999999999999GiB");
  CHECK(wrap.exit_code == 2);
  CHECK(wrap.err == "error: configs/quickstart.yaml: engine.kv_cache_memory: '99999999999999999GiB' is too large a "
                    "size\n");
  auto digits = gen("engine.kv_cache_memory=123456789012345678901");
  CHECK(digits.exit_code == 2);
  CHECK_THAT(digits.err, Catch::Contains("is too large a size"));
  auto index = gen("groups[99999999999999999999].tp=2");
  CHECK(index.exit_code == 2);
  CHECK_THAT(index.err, Catch::Contains("groups[99999999999999999999].tp: --set: no element 99999999999999999999 here"));
  auto big = gen("engine.kv_cache_memory=10000GiB");
  CHECK(big.exit_code == 2);
  CHECK_THAT(big.err, Catch::Contains("engine.kv_cache_memory: the KV cache asks for 9.77 TiB"));
  auto timeout = gen("engine.step_timeout=-1s");
  CHECK(timeout.exit_code == 2);
  CHECK_THAT(timeout.err, Catch::Contains("engine.step_timeout: must be a duration such as 2s or 500ms, got '-1s'"));
}

TEST_CASE("an allocation that fails despite the check is out of memory under its key", "[memory][limits][cli]") {
  // Address space capped below the KV pool: the machine-wide check passes, the worker's mapping is refused.
  for (const char* file : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    INFO(file);
    auto r = run_with_address_space(3000000, std::string("generate ") + file +
                                                 " --prompt-ids 1 --max-tokens 4 --set engine.kv_cache_memory=4GiB");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("engine.kv_cache_memory: out of memory while allocating") &&
                          Catch::Contains("KV blocks of 16 tokens"));
  }
}

TEST_CASE("durations parse with units and refuse nonsense", "[config][limits]") {
  using std::chrono::milliseconds;
  CHECK(parse_duration("2s").value() == milliseconds(2000));
  CHECK(parse_duration("500ms").value() == milliseconds(500));
  CHECK(parse_duration("1.5").value() == milliseconds(1500));
  CHECK(parse_duration("2m").value() == milliseconds(120000));
  CHECK(parse_duration("100us").value() == milliseconds(1));
  CHECK(parse_duration("0").value() == milliseconds(0));
  CHECK(parse_duration("-1s").error().message == "must be a duration such as 2s or 500ms, got '-1s'");
  CHECK(parse_duration("1.2.3s").error().message == "must be a duration such as 2s or 500ms, got '1.2.3s'");
  CHECK(parse_duration("nan").error().message == "must be a duration such as 2s or 500ms, got 'nan'");
  CHECK(parse_duration("3 fortnights").error().message ==
        "unknown duration unit 'fortnights' in '3 fortnights' (use ms, s, m, h)");
  CHECK(parse_duration("99999999999999999999h").error().message == "'99999999999999999999h' is too long a duration");
  TopologyOverrides o;
  o.set = {"engine.step_timeout=0s"};
  CHECK(load_topology(test::source_dir() / "configs/quickstart.yaml", o).error().message ==
        (test::source_dir() / "configs/quickstart.yaml").string() + ": engine.step_timeout: must be positive");
}

TEST_CASE("tokenize refuses a line nested too deep instead of overflowing its stack", "[limits][cli]") {
  test::TempDir tmp;
  test::write_file(tmp.path() / "in", std::string(200000, '[') + "\n{\"text\": \"hi\"}\n");
  const std::string cmd = test::shell_quote(test::actord_binary()) + " tokenize --model " +
                          test::shell_quote(test::stories_dir()) + " < " + test::shell_quote(tmp.path() / "in") + " > " +
                          test::shell_quote(tmp.path() / "out");
  const int status = std::system(cmd.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);  // a bad line makes the run exit 2; the others are answered
  std::ifstream out(tmp.path() / "out");
  std::string first, second;
  std::getline(out, first);
  std::getline(out, second);
  CHECK(first == R"({"error":"bad input line: nested deeper than 64 levels"})");
  CHECK(second == R"({"ids":[1,270,417]})");
}
