// The serving simulator (sim/): the step cost model's fit recovers a known model from its steps and refuses what
// it cannot fit; profiles round-trip and name what is wrong; the simulator plays scripted fleets whose every token
// time follows from a constant step cost: batching, the concurrency limit, data parallel replicas, a prefill ->
// decode hand-off, a KV pool that forces preemption, and requests it refuses.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sim/cost_profile.hpp"
#include "sim/serving_simulator.hpp"
#include "test_util.hpp"

using namespace actord;
using namespace actord::sim;

namespace {

StepShape shape(uint64_t prefill, uint64_t decode, uint64_t pairs) {
  StepShape s;
  s.prefill_tokens = prefill;
  s.decode_tokens = decode;
  s.attention_pairs = pairs;
  s.sequences = decode + (prefill > 0 ? 1 : 0);
  return s;
}

// Every step 1 ms, whatever its shape.
StepCostModel one_ms() { return StepCostModel({{1, 1000}, {4096, 1000}}, 0); }

SimFleet fleet_of(int replicas, uint32_t kv_blocks = 1024, RoutePolicy router = RoutePolicy::round_robin) {
  SimFleet f;
  f.router = {router, router};
  SimReplicaGroup g;
  g.name = "main";
  g.replicas = replicas;
  g.limits.max_model_len = 2048;
  g.kv_blocks = kv_blocks;
  g.cost = one_ms();
  f.groups.push_back(g);
  return f;
}

SimRequest request(double at, int prompt, uint32_t max_tokens, int32_t first = 3) {
  SimRequest r;
  r.arrival_s = at;
  for (int i = 0; i < prompt; ++i) r.prompt.push_back(first + i % 400);
  r.max_tokens = max_tokens;
  return r;
}

std::vector<double> ms(const std::vector<double>& s) {
  std::vector<double> out;
  for (double t : s) out.push_back(std::round(t * 1e6) / 1e3);  // microsecond rounding
  return out;
}

}  // namespace

TEST_CASE("step cost model - the fit recovers a flat-then-linear step time and the cost per attention pair",
          "[sim]") {
  // The truth: 2 ms up to 16 tokens, then 40 us per token more; 0.25 us per attention pair.
  auto truth = [](const StepShape& s) {
    const double t = double(s.tokens());
    return 2000 + (t > 16 ? 40 * (t - 16) : 0) + 0.25 * double(s.attention_pairs);
  };
  std::vector<MeasuredStep> steps;
  for (uint64_t rows : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64})
    for (uint64_t context : {16, 256, 1024}) {
      const StepShape s = shape(0, rows, rows * context);
      steps.push_back({s, truth(s)});
    }
  for (uint64_t prompt : {64, 128, 256, 512, 1024}) {
    const StepShape s = shape(prompt, 0, prompt * (prompt + 1) / 2);
    steps.push_back({s, truth(s)});
  }
  auto model = StepCostModel::fit(steps);
  REQUIRE(model.ok());
  CHECK(model->per_pair_us() == Approx(0.25).epsilon(0.05));
  for (const StepShape& s : {shape(0, 1, 100), shape(0, 20, 20 * 500), shape(0, 64, 64 * 2000), shape(700, 0, 245350)})
    CHECK(model->predict_us(s) == Approx(truth(s)).epsilon(0.05));
  CHECK(model->median_error() < 0.02);
  CHECK(std::abs(model->total_error()) < 0.02);
  CHECK(model->num_steps() == steps.size());

  // Its JSON gives the same predictions.
  auto back = StepCostModel::from_json(model->to_json(), "p");
  REQUIRE(back.ok());
  CHECK(back->predict_us(shape(0, 20, 10000)) == Approx(model->predict_us(shape(0, 20, 10000))));
}

TEST_CASE("step cost model - a prior fills the step sizes the measured steps lack, scaled as they measured it",
          "[sim]") {
  // The prior (an isolated grid) says 1 ms + 10 us per token; served steps of 1-8 tokens took twice that.
  const StepCostModel prior({{1, 1010}, {4096, 1000 + 10 * 4096.0}}, 0);
  std::vector<MeasuredStep> served;
  for (uint64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8})
    served.push_back({shape(0, rows, 0), 2 * (1000 + 10 * double(rows))});
  auto alone = StepCostModel::fit(served);
  auto filled = StepCostModel::fit(served, &prior);
  REQUIRE(alone.ok());
  REQUIRE(filled.ok());
  CHECK(filled->predict_us(shape(0, 4, 0)) == Approx(2 * 1040).epsilon(0.03));
  // 1,000 tokens: the measured ratio (2x) of the nearest measured sizes applied to the prior.
  CHECK(filled->predict_us(shape(1000, 0, 0)) == Approx(2 * 11000).epsilon(0.05));
  CHECK(filled->knots().back().tokens == 4096);
  CHECK(alone->knots().back().tokens == 8);  // alone, the fit knows nothing past 8 tokens
  CHECK(filled->num_steps() == served.size());  // its errors are those of the measured steps
  CHECK(filled->median_error() < 0.03);
}

TEST_CASE("step cost model - too few steps, steps of one size and bad JSON are refused, naming why", "[sim]") {
  std::vector<MeasuredStep> few(5, MeasuredStep{shape(0, 1, 10), 100});
  auto refused = StepCostModel::fit(few);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("too few steps") && Catch::Contains("at least 8"));
  std::vector<MeasuredStep> same(20, MeasuredStep{shape(0, 4, 40), 100});
  refused = StepCostModel::fit(same);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("every step measured had 4 tokens"));

  using nlohmann::json;
  auto bad = [](const json& j) { return StepCostModel::from_json(j, "f.json: replicas[0].cost").error().message; };
  CHECK(bad(json{{"knots", {{1, 5}}}, {"per_pair_us", 0}}) ==
        "f.json: replicas[0].cost.knots: expected a list of at least 2 [tokens, us] pairs");
  CHECK(bad(json{{"knots", {{4, 5}, {2, 6}}}, {"per_pair_us", 0}}) ==
        "f.json: replicas[0].cost.knots[1]: tokens must be in [1, 2^40] and ascending");
  CHECK(bad(json{{"knots", {{1, 5}, {2, "x"}}}, {"per_pair_us", 0}}) ==
        "f.json: replicas[0].cost.knots[1]: expected [tokens, us], two finite numbers");
  CHECK(bad(json{{"knots", {{1, 5}, {2, 6}}}, {"per_pair_us", -1}}) ==
        "f.json: replicas[0].cost.per_pair_us: expected a finite number >= 0");
}

TEST_CASE("cost profile - saved and loaded, a shape it lacks named with the shapes it has, bad files naming the key",
          "[sim]") {
  CostProfile p;
  p.cpu = "a CPU";
  ReplicaShape a;
  a.model = "M";
  a.threads = 2;
  p.put({a, 100, one_ms()});
  ReplicaShape b = a;
  b.tp = 2;
  b.placement = "process";
  p.put({b, 50, one_ms()});
  p.put({a, 120, one_ms()});  // replaces
  REQUIRE(p.replicas.size() == 2);
  CHECK(p.replicas[0].kv_blocks == 120);
  p.handoff = HandOffCost{1500, 0.5, 7};
  test::TempDir tmp;
  REQUIRE(p.save(tmp.path() / "p.json").ok());
  auto loaded = CostProfile::load(tmp.path() / "p.json");
  REQUIRE(loaded.ok());
  CHECK(loaded->replicas.size() == 2);
  CHECK(loaded->replicas[1].shape == b);
  REQUIRE(loaded->handoff);
  CHECK(loaded->handoff->per_token_us == 0.5);
  REQUIRE(loaded->find(b, "x").ok());

  ReplicaShape c = a;
  c.threads = 1;
  auto missing = loaded->find(c, "t.yaml: groups[1]");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message,
             Catch::StartsWith("t.yaml: groups[1]: the cost profile has no replica of tp 1 x pp 1, ep 1, 1 thread per "
                               "rank, thread, cpu of M (calibrate it: actord calibrate); it has:") &&
                 Catch::Contains("tp 2 x pp 1, ep 1, 2 threads per rank, process, cpu of M"));

  auto write = [&](const std::string& text) {
    std::ofstream(tmp.path() / "bad.json") << text;
    return CostProfile::load(tmp.path() / "bad.json").error().message;
  };
  const std::string file = (tmp.path() / "bad.json").string();
  CHECK(write("{") == file + ": not JSON");
  CHECK(write("{\"version\": 9}") == file + ": version: expected 1");
  CHECK(write("{\"version\": 1, \"replicas\": [{\"shape\": {\"model\": \"M\"}}]}") ==
        file + ": replicas[0].shape.device: expected a string");
  CHECK(CostProfile::load(tmp.path() / "none.json").error().message ==
        (tmp.path() / "none.json").string() + ": cannot read the cost profile");
}

TEST_CASE("simulator - one request at 1 ms a step: its first token with the prefill, then one a step", "[sim]") {
  auto report = simulate(fleet_of(1), {request(0.5, 10, 5)}, 8);
  REQUIRE(report.ok());
  REQUIRE(report->requests.size() == 1);
  CHECK(report->requests[0].error.empty());
  CHECK(report->requests[0].sent_s == 0.5);
  CHECK(ms(report->requests[0].token_s) == std::vector<double>{501, 502, 503, 504, 505});
  CHECK(report->end_s == Approx(0.505));
  REQUIRE(report->replicas.size() == 1);
  CHECK(report->replicas[0].steps == 5);
  CHECK(report->replicas[0].prefill_tokens == 10);
  CHECK(report->replicas[0].decode_tokens == 4);
  CHECK(report->replicas[0].busy_s == Approx(0.005));
}

TEST_CASE("simulator - requests batch together - the concurrency holds later ones back until one ends", "[sim]") {
  const std::vector<SimRequest> two = {request(0, 10, 3, 3), request(0, 12, 3, 50)};
  auto together = simulate(fleet_of(1), two, 8);
  REQUIRE(together.ok());
  CHECK(ms(together->requests[0].token_s) == std::vector<double>{1, 2, 3});
  CHECK(ms(together->requests[1].token_s) == std::vector<double>{1, 2, 3});
  CHECK(together->replicas[0].steps == 3);

  auto one_at_a_time = simulate(fleet_of(1), two, 1);
  REQUIRE(one_at_a_time.ok());
  CHECK(ms(one_at_a_time->requests[0].token_s) == std::vector<double>{1, 2, 3});
  CHECK(one_at_a_time->requests[1].sent_s == Approx(0.003));
  CHECK(ms(one_at_a_time->requests[1].token_s) == std::vector<double>{4, 5, 6});

  // A request arriving while another decodes joins the running batch at the next step.
  auto joining = simulate(fleet_of(1), {request(0, 10, 4, 3), request(0.0015, 10, 2, 90)}, 8);
  REQUIRE(joining.ok());
  CHECK(ms(joining->requests[1].token_s) == std::vector<double>{3, 4});
}

TEST_CASE("simulator - two replicas under round robin serve two requests at once", "[sim]") {
  auto report = simulate(fleet_of(2), {request(0, 10, 3, 3), request(0, 10, 3, 50)}, 8);
  REQUIRE(report.ok());
  CHECK(ms(report->requests[0].token_s) == std::vector<double>{1, 2, 3});
  CHECK(ms(report->requests[1].token_s) == std::vector<double>{1, 2, 3});
  REQUIRE(report->replicas.size() == 2);
  CHECK(report->replicas[0].steps == 3);
  CHECK(report->replicas[1].steps == 3);
}

TEST_CASE("simulator - a prefill replica hands the sequence to a decode replica after its first token", "[sim]") {
  SimFleet f = fleet_of(1);
  f.groups[0].name = "prefill";
  f.groups[0].role = ReplicaRole::prefill;
  SimReplicaGroup decode = f.groups[0];
  decode.name = "decode";
  decode.role = ReplicaRole::decode;
  f.groups.push_back(decode);
  f.handoff = HandOffCost{1500, 50, 0};  // 1.5 ms + 50 us x 10 positions = 2 ms
  auto report = simulate(f, {request(0, 10, 4)}, 8);
  REQUIRE(report.ok());
  // First token with the prefill (1 ms), the KV moves (2 ms), then a decode step each.
  CHECK(ms(report->requests[0].token_s) == std::vector<double>{1, 4, 5, 6});
  CHECK(report->replicas[0].handoffs == 1);
  CHECK(report->replicas[0].steps == 1);
  CHECK(report->replicas[1].steps == 3);
  CHECK(report->replicas[1].prefill_tokens == 0);  // its KV came along
}

TEST_CASE("simulator - a KV pool too small for the batch preempts and still completes every request", "[sim]") {
  std::vector<SimRequest> many;
  for (int i = 0; i < 12; ++i) many.push_back(request(0, 40, 60, 3 + 17 * i));
  auto report = simulate(fleet_of(1, 24), many, 64);  // 24 blocks of 16: 384 positions for 12 x 100
  REQUIRE(report.ok());
  for (const SimOutcome& o : report->requests) {
    CHECK(o.error.empty());
    CHECK(o.token_s.size() == 60);
  }
  CHECK(report->replicas[0].preemptions > 0);
}

TEST_CASE("simulator - refuses fleets without replicas or costs and requests out of order - a request too long fails "
          "alone", "[sim]") {
  SimFleet none = fleet_of(0);
  CHECK(simulate(none, {request(0, 4, 2)}, 1).error().message == "the fleet has no replicas");
  SimFleet uncosted = fleet_of(1);
  uncosted.groups[0].cost = StepCostModel();
  CHECK(simulate(uncosted, {request(0, 4, 2)}, 1).error().message == "group 'main': no cost model");
  CHECK(simulate(fleet_of(1), {request(1, 4, 2), request(0, 4, 2)}, 1).error().message ==
        "request 1 arrives before the one before it");
  CHECK(simulate(fleet_of(1), {request(0, 4, 2)}, 0).error().message == "concurrency must be at least 1");
  SimFleet outside = fleet_of(3);
  outside.groups[0].autoscale = {1, 2, 2, 0, std::chrono::milliseconds(0), std::chrono::milliseconds(0),
                                 std::chrono::milliseconds(10)};
  CHECK(simulate(outside, {request(0, 4, 2)}, 1).error().message ==
        "group 'main': autoscaled, it needs KV blocks, a cost model, an interval and replicas within its bounds");
  auto report = simulate(fleet_of(1), {request(0, 3000, 2), request(0, 4, 2)}, 1);
  REQUIRE(report.ok());
  CHECK_FALSE(report->requests[0].error.empty());
  CHECK(report->requests[0].token_s.empty());
  CHECK(ms(report->requests[1].token_s) == std::vector<double>{1, 2});
}

TEST_CASE("simulator - an autoscaled group grows by its load as the engine's autoscaler says: the added replica takes "
          "the sequences the first had not started, and every request completes sooner", "[sim][autoscale]") {
  // Two sequences run at a time per replica; 8 long requests at once: 6 wait on replica 0.
  std::vector<SimRequest> eight;
  for (int i = 0; i < 8; ++i) eight.push_back(request(0, 10, 100, 3 + 17 * i));
  SimFleet fixed = fleet_of(1);
  fixed.groups[0].limits.max_num_seqs = 2;
  auto alone = simulate(fixed, eight, 64);
  REQUIRE(alone.ok());
  CHECK(alone->resizes.empty());

  SimFleet scaled = fixed;
  // 1 to 2 replicas of 2 sequences each, up at the first look that wants more, down after 50 ms; a look every
  // 10 ms; an added replica serves 5 ms after the decision.
  scaled.groups[0].autoscale = {1, 2, 2, 0, std::chrono::milliseconds(0), std::chrono::milliseconds(50),
                                std::chrono::milliseconds(10)};
  scaled.groups[0].start_s = 0.005;
  auto grown = simulate(scaled, eight, 64);
  REQUIRE(grown.ok());
  for (const SimOutcome& o : grown->requests) {
    CHECK(o.error.empty());
    CHECK(o.token_s.size() == 100);
  }
  REQUIRE_FALSE(grown->resizes.empty());
  CHECK(grown->resizes[0].group == "main");
  CHECK(grown->resizes[0].from == 1);
  CHECK(grown->resizes[0].to == 2);
  CHECK(grown->resizes[0].at_s == Approx(0.015));  // the look at 10 ms, then 5 ms to start
  REQUIRE(grown->replicas.size() == 2);
  CHECK(grown->replicas[1].prefill_tokens > 0);  // it prefilled sequences that had waited on replica 0
  CHECK(grown->end_s < alone->end_s);
  for (size_t k = 1; k < grown->resizes.size(); ++k) CHECK(grown->resizes[k].at_s >= grown->resizes[k - 1].at_s);
}
