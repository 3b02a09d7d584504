// The topology file: defaults, validation with paths, overrides.
#include <catch2/catch.hpp>
#include <filesystem>

#include "core/topology_config.hpp"

using namespace actord;

namespace {

const char* kMinimal = R"(
model: {path: ../models/stories260K}
groups:
  - {name: main, device: cpu}
)";

std::string error_of(const std::string& yaml, const TopologyOverrides& o = {}) {
  auto r = parse_topology(yaml, "configs/t.yaml", o);
  REQUIRE_FALSE(r.ok());
  return r.error().message;
}

}  // namespace

TEST_CASE("the bundled topologies load and differ only in placement", "[config]") {
  const std::filesystem::path root = ACTORD_SOURCE_DIR;
  auto one = load_topology(root / "configs/quickstart.yaml");
  auto two = load_topology(root / "configs/quickstart-2proc.yaml");
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  CHECK(one->groups.at(0).placement == Placement::thread);
  CHECK(two->groups.at(0).placement == Placement::process);
  CHECK(std::filesystem::equivalent(one->model.path, root / "models/stories260K"));
  CHECK(one->engine.kv_cache_memory == 64ull << 20);
}

TEST_CASE("defaults fill what the file leaves out - relative model paths follow the file", "[config]") {
  auto cfg = parse_topology(kMinimal, "/etc/actord/t.yaml");
  REQUIRE(cfg.ok());
  CHECK(cfg->model.path == std::filesystem::path("/etc/models/stories260K"));
  CHECK(cfg->engine.max_num_seqs == 64);
  CHECK(cfg->engine.block_size == 16);
  CHECK(cfg->engine.kv_cache_memory == 256ull << 20);
  CHECK(cfg->groups.at(0).placement == Placement::thread);
}

TEST_CASE("unknown keys are reported with their path", "[config]") {
  CHECK(error_of(std::string(kMinimal) + "engine: {max_num_seq: 3}\n") ==
        "configs/t.yaml: engine.max_num_seq: unknown key (known keys: block_size, enable_prefix_caching, "
        "kv_cache_dtype, kv_cache_memory, max_model_len, max_num_batched_tokens, max_num_seqs, preemption_mode, "
        "step_timeout, swap_space)");
  CHECK_THAT(error_of("model: {path: m}\ngroups: [{name: a, colour: red}]\n"),
             Catch::StartsWith("configs/t.yaml: groups[0].colour: unknown key"));
  CHECK_THAT(error_of("modle: {path: m}\n"), Catch::StartsWith("configs/t.yaml: modle: unknown key"));
}

TEST_CASE("malformed YAML and bad values give one clear error", "[config]") {
  CHECK_THAT(error_of("model: {path: [unclosed\n"), Catch::StartsWith("configs/t.yaml: malformed YAML"));
  CHECK(error_of("") == "configs/t.yaml: the file is empty");
  CHECK(error_of("- a\n- b\n") == "configs/t.yaml: the topology must be a YAML mapping");
  CHECK(error_of(std::string(kMinimal) + "engine: {block_size: 3}\n") ==
        "configs/t.yaml: engine.block_size: must be a power of two between 1 and 256, got 3");
  CHECK(error_of(std::string(kMinimal) + "engine: {max_num_seqs: lots}\n") ==
        "configs/t.yaml: engine.max_num_seqs: must be an integer, got 'lots'");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_dtype: int4}\n") ==
        "configs/t.yaml: engine.kv_cache_dtype: must be auto, float32, bfloat16 or float16, got 'int4'");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 12 parsecs}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: unknown size unit 'parsecs' in '12 parsecs' (use KiB, MiB, GiB, TiB)");
  CHECK(error_of(std::string(kMinimal) + "engine: {swap_space: lots}\n") ==
        "configs/t.yaml: engine.swap_space: must be a size such as 256MiB or 1.5GiB, got 'lots'");
  // Sizes that do not fit 64 bits are refused, not wrapped; fractions are whole bytes.
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 99999999999999999GiB}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: '99999999999999999GiB' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 184467440737095516160}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: '184467440737095516160' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "server: {max_request_body: 99999999999999999999999}\n") ==
        "configs/t.yaml: server.max_request_body: '99999999999999999999999' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "engine: {kv_cache_memory: 1.GiB}\n") ==
        "configs/t.yaml: engine.kv_cache_memory: must be a size such as 256MiB or 1.5GiB, got '1.GiB'");
  CHECK(parse_byte_size("1.5GiB").value() == 3ull << 29);
  CHECK(parse_byte_size("0.5 KiB").value() == 512);
  CHECK(parse_byte_size("2TiB").value() == 2ull << 40);
  CHECK(parse_byte_size("16EiB").error().message == "unknown size unit 'EiB' in '16EiB' (use KiB, MiB, GiB, TiB)");
  CHECK(parse_byte_size("16777215TiB").value() == 16777215ull << 40);
  CHECK(parse_byte_size("16777216TiB").error().message == "'16777216TiB' is too large a size");
  CHECK(error_of(std::string(kMinimal) + "engine: {preemption_mode: evict}\n") ==
        "configs/t.yaml: engine.preemption_mode: must be recompute or swap, got 'evict'");
  CHECK(error_of("groups: [{name: a}]\n") == "configs/t.yaml: model.path: is required");
  CHECK(error_of("model: {path: m}\n") == "configs/t.yaml: groups: must be a non-empty list of groups");
  CHECK(error_of("model: {path: m}\ngroups: [{tp: 3}]\n") ==
        "configs/t.yaml: groups[0].tp: tensor parallelism is not supported yet (must be 1)");
  CHECK(error_of("model: {path: m}\ngroups: [{placement: moon}]\n") ==
        "configs/t.yaml: groups[0].placement: must be thread or process, got 'moon'");
  CHECK(error_of("model: {path: m}\ngroups: [{device: cuda}]\n") ==
        "configs/t.yaml: groups[0].device: the cuda backend is not built yet (use cpu)");
  CHECK(error_of("model: {path: m, dtype: int8}\ngroups: [{}]\n") ==
        "configs/t.yaml: model.dtype: must be auto, float32, bfloat16 or float16, got 'int8'");
  CHECK(error_of("model: {path: m, load_format: pickle}\ngroups: [{}]\n") ==
        "configs/t.yaml: model.load_format: must be auto or dummy, got 'pickle'");
  CHECK(error_of("model: {path: m}\ngroups: [{threads: -1}]\n") ==
        "configs/t.yaml: groups[0].threads: must be 0 (one per core) to 1024, got -1");
}

TEST_CASE("set overrides any key by its path and is validated like the file", "[config]") {
  TopologyOverrides o;
  o.set = {"engine.max_num_seqs=8", "groups[0].placement=process", "server.port=9001", "engine.kv_cache_memory=1GiB"};
  auto cfg = parse_topology(kMinimal, "t.yaml", o);
  REQUIRE(cfg.ok());
  CHECK(cfg->engine.max_num_seqs == 8);
  CHECK(cfg->groups[0].placement == Placement::process);
  CHECK(cfg->server.port == 9001);
  CHECK(cfg->engine.kv_cache_memory == 1ull << 30);

  // An index too large for any list is no element, not an abort.
  o.set = {"groups[99999999999999999999].tp=2"};
  CHECK(parse_topology(kMinimal, "t.yaml", o).error().message ==
        "t.yaml: groups[99999999999999999999].tp: --set: no element 99999999999999999999 here");
  o.set = {"groups[0]=99999999999999999999999"};
  CHECK_THAT(parse_topology(kMinimal, "t.yaml", o).error().message, Catch::StartsWith("t.yaml: groups"));
  o.set = {"groups.0.name=other"};
  REQUIRE(parse_topology(kMinimal, "t.yaml", o)->groups[0].name == "other");

  o.set = {"engine.max_num_seqs=0"};
  CHECK(error_of(kMinimal, o) == "configs/t.yaml: engine.max_num_seqs: must be at least 1, got 0");
  o.set = {"engine.bogus=1"};
  CHECK_THAT(error_of(kMinimal, o), Catch::StartsWith("configs/t.yaml: engine.bogus: unknown key"));
  o.set = {"groups[3].tp=1"};
  CHECK(error_of(kMinimal, o) == "configs/t.yaml: groups[3].tp: --set: no element 3 here");
  o.set = {"no_equals_sign"};
  CHECK(error_of(kMinimal, o) == "configs/t.yaml: --set no_equals_sign: expected dotted.key=value");
}

TEST_CASE("the model override replaces the model path - relative to the working directory", "[config]") {
  TopologyOverrides o;
  o.model = "some/dir";
  auto cfg = parse_topology(kMinimal, "/x/t.yaml", o);
  REQUIRE(cfg.ok());
  CHECK(cfg->model.path == std::filesystem::path("some/dir"));
}

TEST_CASE("byte sizes", "[config]") {
  CHECK(*parse_byte_size("64MiB") == 64ull << 20);
  CHECK(*parse_byte_size("2 GiB") == 2ull << 30);
  CHECK(*parse_byte_size("1000") == 1000);
  CHECK(*parse_byte_size("5MB") == 5000000);
  CHECK_FALSE(parse_byte_size("MiB").ok());
}
