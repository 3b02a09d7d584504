// Prefill/decode disaggregation (groups[].role): a prefill group computes prompts and first tokens, a decode group
// the rest, each sequence moving between them with its KV. Every request's output equals its run on one colocated
// worker (greedy, seeded, logprobs, stop strings; n > 1 and max_tokens 1 stay on the prefill replica), across
// shapes (a tp 2 decode group re-lays the KV out), through a kill -9 of the decode worker, and while the decode group
// scales; topologies the roles cannot serve are refused naming the key.
#include <signal.h>

#include <catch2/catch.hpp>
#include <thread>

#include "engine_test_util.hpp"
#include "process_util.hpp"

using namespace actord;

namespace {

// Greedy and seeded prompts of stories260K, of several lengths (some longer than a block), some asking logprobs.
std::vector<GenerateRequest> mixed_requests(size_t count, uint32_t max_tokens) {
  std::vector<GenerateRequest> out;
  for (size_t i = 0; i < count; ++i) {
    GenerateRequest r;
    for (size_t t = 0; t < 2 + (i * 7) % 40; ++t) r.prompt_ids.push_back(static_cast<int32_t>(3 + (i * 37 + t * 11) % 500));
    r.prompt_ids.insert(r.prompt_ids.begin(), 1);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.seed = 1000 + i;
    if (i % 4 == 1) r.sampling.logprobs = 3;
    out.push_back(std::move(r));
  }
  return out;
}

// Same tokens, finish reasons and logprobs (bit for bit: the CPU executor's logits are batch invariant and the KV
// moves byte for byte). `other_shape`: a group of another tp computed part of it, whose all-reduce rounds
// differently: greedy tokens equal, logprobs within 1e-3, sampled requests the same length.
void check_same(const std::vector<GenerateOutput>& got, const std::vector<GenerateOutput>& want,
                const std::vector<GenerateRequest>& requests, bool other_shape = false) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("output " << i << (got[i].error ? ": " + got[i].error->message : std::string()));
    CHECK_FALSE(got[i].error);
    CHECK(got[i].finish_reason == want[i].finish_reason);
    if (other_shape && requests[got[i].request_index].sampling.temperature > 0) {
      CHECK(got[i].generated_ids.size() == want[i].generated_ids.size());
      continue;
    }
    CHECK(got[i].generated_ids == want[i].generated_ids);
    REQUIRE(got[i].logprobs.size() == want[i].logprobs.size());
    for (size_t t = 0; t < want[i].logprobs.size(); ++t) {
      if (other_shape) CHECK(got[i].logprobs[t].logprob == Approx(want[i].logprobs[t].logprob).margin(1e-3));
      else CHECK(got[i].logprobs[t].logprob == want[i].logprobs[t].logprob);
      CHECK(got[i].logprobs[t].top_ids == want[i].logprobs[t].top_ids);
    }
  }
}

std::vector<GenerateOutput> colocated(const std::vector<GenerateRequest>& requests) {
  auto engine = test::start_engine(test::quickstart());
  auto out = engine->generate(requests);
  REQUIRE(out.ok());
  return *out;
}

}  // namespace

TEST_CASE("disaggregation - prefill and decode groups give every request its colocated output, and sequences move with "
          "their KV", "[disaggregation][engine]") {
  std::vector<GenerateRequest> requests = mixed_requests(24, 40);
  {
    GenerateRequest forked = requests[3];  // n > 1: forks at its first sample, decodes where it prefilled
    forked.sampling.n = 2;
    forked.sampling.temperature = 0.9f;
    requests.push_back(forked);
    GenerateRequest one = requests[4];  // done at its first token: never leaves
    one.max_tokens = 1;
    requests.push_back(one);
    GenerateRequest stop;  // a stop string ends it on the decode replica
    stop.prompt = "Once upon a time";
    stop.max_tokens = 60;
    stop.sampling.temperature = 0.0f;
    stop.stop = {"."};
    requests.push_back(stop);
  }
  const auto want = colocated(requests);
  const size_t handed_on = 24 + 1;  // the 24 and the stop-string request

  SECTION("one prefill and one decode worker process") {
    auto engine = test::start_engine(test::quickstart("configs/pd.yaml"));
    auto fleet = engine->fleet();
    REQUIRE(fleet.ok());
    REQUIRE(fleet->replicas.size() == 2);
    CHECK(fleet->replicas[0].group == "prefill");
    CHECK(fleet->replicas[0].role == "prefill");
    CHECK(fleet->replicas[1].group == "decode");
    CHECK(fleet->replicas[1].role == "decode");
    auto got = engine->generate(requests);
    REQUIRE(got.ok());
    check_same(*got, want, requests);
    auto stats = engine->stats();
    REQUIRE(stats.ok());
    CHECK(stats->prefill_handoffs == handed_on);
    CHECK(stats->kv_moves_out == handed_on);  // every one with its KV
    CHECK(stats->kv_moves_in == handed_on);
  }
  SECTION("a prefill group of threads, a decode group of tp 2 processes (the KV re-laid out per rank)") {
    auto engine = test::start_engine(test::quickstart(
        "configs/pd.yaml", {"groups[0].placement=thread", "groups[1].tp=2", "groups[0].oversubscribe=true",
                            "groups[1].oversubscribe=true"}));
    auto got = engine->generate(requests);
    REQUIRE(got.ok());
    check_same(*got, want, requests, /*other_shape=*/true);
    auto stats = engine->stats();
    REQUIRE(stats.ok());
    CHECK(stats->kv_moves_in == handed_on);
  }
  SECTION("two prefill replicas, one decode replica, round robin") {
    auto engine = test::start_engine(test::quickstart(
        "configs/pd.yaml", {"groups[0].replicas=2", "groups[0].router=round_robin", "groups[1].router=round_robin",
                            "groups[0].placement=thread", "groups[1].placement=thread", "groups[0].oversubscribe=true",
                            "groups[1].oversubscribe=true"}));
    auto got = engine->generate(requests);
    REQUIRE(got.ok());
    check_same(*got, want, requests);
  }
}

TEST_CASE("disaggregation - a kill -9 of the decode worker loses no request, and the decode group scales while serving",
          "[disaggregation][engine][failure]") {
  const auto requests = mixed_requests(32, 200);
  const auto want = colocated(requests);
  // Two cores: the decode group's second replica shares them.
  auto engine = test::start_engine(
      test::quickstart("configs/pd.yaml", {"groups[0].oversubscribe=true", "groups[1].oversubscribe=true"}));
  SECTION("kill -9") {
    auto fleet = engine->fleet();
    REQUIRE(fleet.ok());
    const int32_t decode_pid = fleet->replicas.at(1).pids.at(0);
    REQUIRE(decode_pid > 0);
    // Killed as soon as the first text streamed: sequences are decoding there, prompts still prefilling.
    auto got = test::generate_while(*engine, requests, [&] { REQUIRE(::kill(decode_pid, SIGKILL) == 0); });
    REQUIRE(got.ok());
    check_same(*got, want, requests);
    auto after = engine->fleet();
    REQUIRE(after.ok());
    CHECK(after->replacements >= 1);
    test::check_serves(*engine);
  }
  SECTION("scale the decode group to 2 and back to 1") {
    auto got = test::generate_while(*engine, requests, [&] {
      auto scaled = engine->scale("decode", 2);
      REQUIRE(scaled.ok());
    });
    REQUIRE(got.ok());
    check_same(*got, want, requests);
    auto fleet = engine->fleet();
    REQUIRE(fleet.ok());
    CHECK(std::count_if(fleet->replicas.begin(), fleet->replicas.end(),
                        [](const ReplicaInfo& r) { return r.group == "decode"; }) == 2);
    got = test::generate_while(*engine, requests, [&] { REQUIRE(engine->scale("decode", 1).ok()); });
    REQUIRE(got.ok());
    check_same(*got, want, requests);
    auto bad = engine->scale("nonesuch", 2);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.find("prefill, decode") != std::string::npos);
  }
}

TEST_CASE("disaggregation - topologies the roles cannot serve are refused naming the key",
          "[disaggregation][config]") {
  auto refused = [](std::vector<std::string> set) {
    TopologyOverrides o;
    o.set = std::move(set);
    auto cfg = load_topology(test::source_dir() / "configs/pd.yaml", o);
    REQUIRE_FALSE(cfg.ok());
    return cfg.error().message;
  };
  CHECK_THAT(refused({"groups[1].role=prefill"}), Catch::Contains("groups[0].role") && Catch::Contains("decode"));
  CHECK_THAT(refused({"groups[0].role=decode"}), Catch::Contains("groups[0].role") && Catch::Contains("prefill"));
  CHECK_THAT(refused({"groups[0].role=producer"}), Catch::Contains("groups[0].role") && Catch::Contains("both"));
  // One policy per phase: a group of role both and a decode group both route decode continuations.
  CHECK_THAT(refused({"groups[0].role=both", "groups[1].router=round_robin"}),
             Catch::EndsWith("groups[1].router: must be groups[0]'s (least_tokens): both serve requests in their decode "
                             "phase, which the router routes by one policy, got 'round_robin'"));
  CHECK_THAT(refused({"groups[1].device=cuda"}), Catch::Contains("groups[1].role"));
  // A running engine of several groups keeps serving after an apply it refuses.
  auto engine = test::start_engine(test::quickstart("configs/pd.yaml", {"groups[0].placement=thread",
                                                                       "groups[1].placement=thread"}));
  auto applied = engine->apply("model: {path: " + (test::source_dir() / "models/stories260K").string() +
                               "}\ngroups:\n  - name: prefill\n", "edited.yaml");
  REQUIRE_FALSE(applied.ok());
  CHECK_THAT(applied.error().message, Catch::Contains("groups"));
  test::check_serves(*engine);
}
