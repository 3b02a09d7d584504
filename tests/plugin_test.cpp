// Out-of-tree plugins: the example GeluLlamaForCausalLM library, loaded directly and through a topology's
// `plugins:` list, in one process and in two, and under two-batch overlap (tp2) and attention-FFN disaggregation
// with ping-pong (the schedules every plugin gets); checked against the PyTorch reference; bad plugins are errors.
#include <catch2/catch.hpp>

#include "actors/engine.hpp"
#include "plugins/plugin_loader.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

// A random Llama folder turned into a GeluLlamaForCausalLM, with its PyTorch reference output.
nlohmann::json make_gelu_model(const std::filesystem::path& dir) {
  const std::string script = (test::source_dir() / "tests/reference/hf_reference.py").string();
  const auto model = dir / "gelu";
  REQUIRE(std::system(("/usr/bin/python3 " + script + " make-model --kind llama-gqa --out " + model.string() +
                       " > /dev/null 2>&1").c_str()) == 0);
  std::ifstream in(model / "config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["architectures"] = {"GeluLlamaForCausalLM"};
  cfg["hidden_act"] = "gelu_pytorch_tanh";
  test::write_file(model / "config.json", cfg.dump(2));
  const auto out = dir / "ref.json";
  REQUIRE(std::system(("/usr/bin/python3 " + script + " logits --model " + model.string() +
                       " --prompt-ids 1,403,407,261,378 --decode-steps 12 --out " + out.string() + " > /dev/null 2>&1")
                          .c_str()) == 0);
  std::ifstream ref(out);
  return nlohmann::json::parse(ref);
}

}  // namespace

TEST_CASE("the example plugin runs through a topology and matches the PyTorch reference", "[plugin][reference]") {
  test::TempDir tmp;
  const auto ref = make_gelu_model(tmp.path());
  // Without the plugin the architecture is unknown.
  ModelRegistry plain = ModelRegistry::with_builtins();
  CHECK_FALSE(plain.contains("GeluLlamaForCausalLM"));

  // Whole, in a process, and with the step schedules every plugin gets: two-batch overlap over tp2, and
  // attention-FFN disaggregation with ping-pong micro-batches.
  for (const char* group : {"{placement: thread}", "{placement: process}",
                            "{tp: 2, tbo: true, threads: 1, placement: process}",
                            "{afd: {attention: {workers: 1}, ffn: {workers: 1}}, tbo: true, threads: 1}"}) {
    INFO(group);
    const std::string yaml = std::string("model: {path: gelu}\nplugins: [") + ACTORD_GELU_PLUGIN +
                             "]\ngroups: [" + group + "]\n";
    test::write_file(tmp.path() / "topology.yaml", yaml);
    auto topology = load_topology(tmp.path() / "topology.yaml");
    REQUIRE(topology.ok());
    EngineOptions options;
    options.worker_executable = test::actord_binary();
    auto engine = Engine::start(*topology, options);
    if (!engine) FAIL(engine.error().message);
    GenerateRequest r;
    r.prompt_ids = ref.at("prompt_ids").get<std::vector<int32_t>>();
    r.max_tokens = 12;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    auto out = (*engine)->generate({r, r});  // two sequences: two micro-batches under tbo
    REQUIRE(out.ok());
    for (const GenerateOutput& o : *out) {
      REQUIRE_FALSE(o.error);
      CHECK(o.generated_ids == ref.at("greedy_ids").get<std::vector<int32_t>>());
    }
  }
}

TEST_CASE("bad plugins are clear errors", "[plugin]") {
  ModelRegistry registry = ModelRegistry::with_builtins();
  auto missing = load_plugin("/nonexistent/libx.so", registry);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message == "plugin /nonexistent/libx.so: no such file");
  test::TempDir tmp;
  test::write_file(tmp.path() / "libjunk.so", "not an ELF file");
  auto junk = load_plugin(tmp.path() / "libjunk.so", registry);
  REQUIRE_FALSE(junk.ok());
  CHECK_THAT(junk.error().message, Catch::StartsWith("plugin " + (tmp.path() / "libjunk.so").string() + ": cannot load"));
  // A real shared library that is not a plugin.
  auto not_plugin = load_plugin("/lib/x86_64-linux-gnu/libz.so.1", registry);
  if (std::filesystem::exists("/lib/x86_64-linux-gnu/libz.so.1")) {
    REQUIRE_FALSE(not_plugin.ok());
    CHECK_THAT(not_plugin.error().message, Catch::Contains("not an actord plugin"));
  }
  REQUIRE(load_plugin(ACTORD_GELU_PLUGIN, registry).ok());
  CHECK(registry.contains("GeluLlamaForCausalLM"));
}
