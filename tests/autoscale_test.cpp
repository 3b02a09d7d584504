// groups[].autoscale through the engine: a group grows to max_replicas while its load wants more and shrinks back
// when it is idle, every request completing with a clean run's tokens; status shows each look; actord scale stays
// within the bounds; a max_replicas the machine cannot run is refused at start naming the key (a group placed on
// nodes autoscales too: tests/two_node_test.cpp).
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "parallel_test_util.hpp"

using namespace actord;
using namespace std::chrono_literals;

namespace {

TopologyConfig autoscaled(const std::string& group) {
  auto cfg = parse_topology("model:\n  path: ../models/stories260K\nengine:\n  max_num_seqs: 64\n  kv_cache_memory: "
                            "16MiB\ngroups:\n  - " + group + "\n",
                            test::source_dir() / "configs/autoscaled.yaml");
  REQUIRE(cfg.ok());
  return *cfg;
}

int serving_replicas(Engine& engine) {
  auto fleet = engine.fleet();
  REQUIRE(fleet.ok());
  int serving = 0;
  for (const ReplicaInfo& r : fleet->replicas) serving += r.state == "serving";
  return serving;
}

// 12 greedy prompts of 400 tokens, 24 generated: fed 16 tokens a step, a long prefill backlog in 12 sequences.
std::vector<GenerateRequest> long_prompts() {
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    GenerateRequest r;
    r.prompt_ids.push_back(1);
    for (int j = 1; j < 400; ++j) r.prompt_ids.push_back(3 + (i * 31 + j * 7) % 500);
    r.max_tokens = 24;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    requests.push_back(std::move(r));
  }
  return requests;
}

void check_same_tokens(const Result<std::vector<GenerateOutput>>& out, const std::vector<GenerateOutput>& clean) {
  REQUIRE(out.ok());
  REQUIRE(out->size() == clean.size());
  for (size_t i = 0; i < clean.size(); ++i) {
    INFO("request " << i << ": " << ((*out)[i].error ? (*out)[i].error->message : std::string("no error")));
    REQUIRE_FALSE((*out)[i].error);
    CHECK((*out)[i].generated_ids == clean[i].generated_ids);
  }
}

}  // namespace

TEST_CASE("autoscale: a group grows while its load wants more replicas and shrinks back once idle - every request "
          "completes with a clean run's tokens", "[engine][autoscale]") {
  std::vector<GenerateRequest> requests = test::batch(true);  // 6 sequences: 2 replicas of 4 each
  for (auto& r : requests) r.max_tokens = 400;
  auto clean = test::start_engine(test::quickstart())->generate(requests);
  REQUIRE(clean.ok());

  auto engine = test::start_engine(autoscaled(
      "{name: main, threads: 1, autoscale: {max_replicas: 2, target_sequences: 4, scale_up_after: 0s, "
      "scale_down_after: 300ms, interval: 20ms}}"));
  CHECK(serving_replicas(*engine) == 1);
  bool grew = false;
  std::string look;
  auto out = test::generate_while(*engine, requests, [&] {
    grew = test::eventually([&] { return serving_replicas(*engine) == 2; }, 20s);
    auto fleet = engine->fleet();
    REQUIRE(fleet.ok());
    if (!fleet->autoscale.empty()) look = fleet->autoscale.front();
  });
  CHECK(grew);
  CHECK_THAT(look, Catch::StartsWith("group main: ") && Catch::Contains("(4 sequences each, 1 to 2 replicas)"));
  REQUIRE(out.ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i << ": " << ((*out)[i].error ? (*out)[i].error->message : std::string("no error")));
    REQUIRE_FALSE((*out)[i].error);
    CHECK((*out)[i].generated_ids == (*clean)[i].generated_ids);
  }
  // Idle: back to min_replicas after scale_down_after, and it still serves.
  CHECK(test::eventually([&] { return engine->fleet()->replicas.size() == 1; }, 20s));
  CHECK(test::eventually([&] {  // the next look, at the new size
    auto fleet = engine->fleet();
    return fleet.ok() && fleet->autoscale.size() == 1 &&
           fleet->autoscale[0] == "group main: 0 sequences in 1 replicas (4 sequences each, 1 to 2 replicas)";
  }, 5s));
  test::check_serves(*engine);
  // actord scale stays within the bounds.
  auto beyond = engine->scale("main", 3);
  REQUIRE_FALSE(beyond.ok());
  CHECK(beyond.error().message ==
        "replicas: group main is autoscaled between 1 and 2 replicas (groups[0].autoscale; actord apply changes it), got 3");
}

TEST_CASE("autoscale: with target_prompt_tokens a group grows on its queue of prompts while its sequences alone "
          "would not ask - every request completes with a clean run's tokens", "[engine][autoscale]") {
  const std::vector<GenerateRequest> requests = long_prompts();
  const std::string group = "{name: main, threads: 1, autoscale: {max_replicas: 2, target_sequences: 64, %s"
                            "scale_up_after: 0s, scale_down_after: 300ms, interval: 20ms}}";
  auto with = [&](const std::string& tokens) {
    TopologyConfig cfg = autoscaled(group.substr(0, group.find("%s")) + tokens + group.substr(group.find("%s") + 2));
    cfg.engine.max_num_batched_tokens = 16;
    return cfg;
  };
  auto clean = test::start_engine(with(""))->generate(requests);
  REQUIRE(clean.ok());

  auto engine = test::start_engine(with("target_prompt_tokens: 400, "));
  bool grew = false;
  std::string look;
  auto out = test::generate_while(*engine, requests, [&] {
    grew = test::eventually([&] {
      auto fleet = engine->fleet();
      if (fleet.ok() && !fleet->autoscale.empty() && look.empty()) look = fleet->autoscale.front();
      return serving_replicas(*engine) == 2;
    }, 20s);
  });
  CHECK(grew);
  // The first look seen may come before or after the growth.
  CHECK_THAT(look, Catch::StartsWith("group main: ") && Catch::Contains(" prompt tokens to prefill, in ") &&
                       Catch::Contains(" replicas (64 sequences or 400 prompt tokens each, 1 to 2 replicas)"));
  check_same_tokens(out, *clean);
  CHECK(test::eventually([&] { return engine->fleet()->replicas.size() == 1; }, 20s));
}

TEST_CASE("autoscale: a prefill group (disaggregated) grows on its queue of prompts and hands every prefilled "
          "sequence on to the decode group - every request completes with a colocated run's tokens",
          "[engine][autoscale][disaggregation]") {
  const std::vector<GenerateRequest> requests = long_prompts();
  auto clean = test::start_engine(test::quickstart())->generate(requests);
  REQUIRE(clean.ok());
  auto cfg = parse_topology(
      "model:\n  path: ../models/stories260K\nengine: {max_num_seqs: 64, max_num_batched_tokens: 16, kv_cache_memory: "
      "16MiB}\ngroups:\n  - {name: prefill, role: prefill, threads: 1, oversubscribe: true, autoscale: {max_replicas: 2, target_sequences: "
      "64, target_prompt_tokens: 400, scale_up_after: 0s, scale_down_after: 300ms, interval: 20ms}}\n  - {name: "
      "decode, role: decode, threads: 1, oversubscribe: true}\n",
      test::source_dir() / "configs/autoscaled.yaml");
  REQUIRE(cfg.ok());
  auto engine = test::start_engine(*cfg);
  auto prefill_replicas = [&] {
    auto fleet = engine->fleet();
    REQUIRE(fleet.ok());
    int n = 0;
    for (const ReplicaInfo& r : fleet->replicas) n += r.group == "prefill" && r.state == "serving";
    return n;
  };
  bool grew = false;
  auto out = test::generate_while(*engine, requests, [&] {
    grew = test::eventually([&] { return prefill_replicas() == 2; }, 20s);
  });
  CHECK(grew);
  check_same_tokens(out, *clean);
  CHECK(test::eventually([&] { return prefill_replicas() == 1; }, 20s));
  auto stats = engine->stats();
  REQUIRE(stats.ok());
  // Every prompt was prefilled in the prefill group and crossed with its KV; the retired replica's counters stay in
  // the totals. The added replica took its share at once: the first one handed back what it had not started.
  CHECK(stats->prefill_handoffs == requests.size());
  CHECK(stats->kv_moves_in == requests.size());
  CHECK(stats->rebalanced_seqs > 0);
}

TEST_CASE("autoscale: a max_replicas whose replicas the machine cannot run is refused at start naming the key",
          "[engine][autoscale]") {
  auto too_many = Engine::start(autoscaled("{name: main, threads: 1, autoscale: {max_replicas: 64}}"),
                                test::engine_options());
  REQUIRE_FALSE(too_many.ok());
  CHECK_THAT(too_many.error().message,
             Catch::Contains("configs/autoscaled.yaml: groups[0].autoscale.max_replicas: at 64 replicas, groups[0].threads: "));
}

TEST_CASE("autoscale: actord apply turns autoscaling on without rebuilding a replica - the group then grows under "
          "load, keeps its replicas through an apply of new settings - and off again", "[engine][autoscale][apply]") {
  const std::string plain = "{name: main, threads: 1}";
  const std::string scaled = "{name: main, threads: 1, autoscale: {max_replicas: 2, target_sequences: 2, "
                             "scale_up_after: 0s, scale_down_after: 60s, interval: 20ms}}";
  auto engine = test::start_engine(autoscaled(plain));
  const auto yaml = [](const std::string& group) {
    return "model:\n  path: ../models/stories260K\nengine:\n  max_num_seqs: 64\n  kv_cache_memory: 16MiB\ngroups:\n  - " +
           group + "\n";
  };
  const auto source = test::source_dir() / "configs/autoscaled.yaml";
  auto on = engine->apply(yaml(scaled), source);
  REQUIRE(on.ok());
  CHECK(*on == "group main unchanged");
  std::vector<GenerateRequest> requests = test::batch(true);
  for (auto& r : requests) r.max_tokens = 400;
  bool grew = false;
  auto out = test::generate_while(*engine, requests, [&] {
    grew = test::eventually([&] { return serving_replicas(*engine) == 2; }, 20s);
  });
  CHECK(grew);
  REQUIRE(out.ok());
  for (const GenerateOutput& o : *out) CHECK_FALSE(o.error);
  // Grown to 2 by the autoscaler, the group keeps them through an apply that changes its autoscale settings: the
  // file's count (its starting size, 1) is not the size to go back to.
  auto retuned = engine->apply(yaml("{name: main, threads: 1, autoscale: {max_replicas: 2, target_sequences: 3, "
                                    "scale_up_after: 0s, scale_down_after: 60s, interval: 20ms}}"), source);
  REQUIRE(retuned.ok());
  CHECK(*retuned == "group main unchanged");
  CHECK(serving_replicas(*engine) == 2);
  // Off again: the group keeps its replicas (the file's count), and nothing looks at it any more.
  auto off = engine->apply(yaml("{name: main, replicas: 2, threads: 1}"), source);
  REQUIRE(off.ok());
  CHECK(test::eventually([&] { return engine->fleet()->autoscale.empty(); }, 5s));
  CHECK(serving_replicas(*engine) == 2);
}
