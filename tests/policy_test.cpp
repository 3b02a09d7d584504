// Scheduling policies: priority admission and preemption, scripted; the out-of-tree shortest_prompt_first plugin
// loaded and driven directly and through a topology; unknown policies are clear errors.
#include <catch2/catch.hpp>
#include <deque>
#include <random>

#include "actors/engine.hpp"
#include "plugins/plugin_loader.hpp"
#include "scheduler/batch_scheduler.hpp"
#include "scheduler/policy_registry.hpp"
#include "scheduler_test_util.hpp"
#include "engine_test_util.hpp"

using namespace actord;
using test::answer;

namespace {

SequenceRequest request(uint64_t id, int prompt_len, uint32_t max_tokens, int32_t priority = 0) {
  SequenceRequest r = test::request(id, prompt_len, max_tokens);
  r.priority = priority;
  return r;
}

std::vector<uint64_t> ids_of(const StepPlan& plan) {
  std::vector<uint64_t> ids;
  for (const auto& s : plan.slices) ids.push_back(s.seq_id);
  return ids;
}

SchedulerLimits one_at_a_time(int max_seqs, int block_size) {
  SchedulerLimits l;
  l.max_num_seqs = max_seqs;
  l.max_num_batched_tokens = 64;
  l.block_size = block_size;
  l.max_model_len = 512;
  l.plan_ahead = false;
  return l;
}

}  // namespace

TEST_CASE("priority - lower values are admitted first - ties by arrival", "[scheduler][policy]") {
  BlockAllocator blocks(64);
  BatchScheduler s(one_at_a_time(2, 4), blocks, make_priority_policy());
  s.add(request(1, 3, 5, 5));
  s.add(request(2, 3, 5, 1));
  s.add(request(3, 3, 5, 1));
  s.add(request(4, 3, 5, 0));
  auto plan = s.plan_step();
  CHECK(ids_of(*plan) == std::vector<uint64_t>{4, 2});
}

TEST_CASE("priority - an urgent request preempts the worst running one and the rest resume", "[scheduler][policy]") {
  BlockAllocator blocks(4);  // block_size 4: 16 slots
  BatchScheduler s(one_at_a_time(8, 4), blocks, make_priority_policy());
  s.add(request(1, 7, 20, 3));   // 2 blocks
  s.add(request(2, 7, 20, 5));   // 2 blocks: the worst
  auto plan = s.plan_step();
  REQUIRE(ids_of(*plan) == std::vector<uint64_t>{1, 2});
  answer(s, *plan, 9);
  s.add(request(3, 6, 4, 0));    // needs 2 blocks; none free
  plan = s.plan_step();
  CHECK(s.num_preemptions() == 1);
  CHECK(ids_of(*plan) == std::vector<uint64_t>{1, 3});  // 2 was preempted for it
  CHECK(plan->released == std::vector<uint64_t>{2});
  // An equal or better running priority is never preempted by a worse waiting one.
  BlockAllocator blocks2(4);
  BatchScheduler t(one_at_a_time(8, 4), blocks2, make_priority_policy());
  t.add(request(1, 7, 20, 0));
  t.add(request(2, 7, 20, 0));
  answer(t, *t.plan_step(), 9);
  t.add(request(3, 6, 4, 0));
  plan = t.plan_step();
  CHECK(t.num_preemptions() == 0);
  CHECK(ids_of(*plan) == std::vector<uint64_t>{1, 2});
}

TEST_CASE("priority - out of blocks while decoding, the worst priority makes room", "[scheduler][policy]") {
  BlockAllocator blocks(3);  // block_size 2: 6 token slots
  BatchScheduler s(one_at_a_time(8, 2), blocks, make_priority_policy());
  s.add(request(1, 2, 10, 9));  // admitted first, worst priority
  s.add(request(2, 2, 10, 0));
  auto plan = s.plan_step();
  answer(s, *plan, 5);
  plan = s.plan_step();  // both need a second block, one is free: 1 goes although 2 was admitted later
  CHECK(ids_of(*plan) == std::vector<uint64_t>{2});
  CHECK(s.num_preemptions() == 1);
}

TEST_CASE("the shortest_prompt_first plugin orders admissions by length", "[scheduler][policy][plugin]") {
  ModelRegistry models = ModelRegistry::with_builtins();
  PolicyRegistry policies = PolicyRegistry::with_builtins();
  CHECK_FALSE(policies.contains("shortest_prompt_first"));
  REQUIRE(load_plugin(ACTORD_SPF_PLUGIN, models, &policies).ok());
  REQUIRE(policies.contains("shortest_prompt_first"));
  auto policy = policies.create("shortest_prompt_first");
  REQUIRE(policy.ok());
  BlockAllocator blocks(64);
  BatchScheduler s(one_at_a_time(2, 4), blocks, std::move(*policy));
  s.add(request(1, 30, 5));
  s.add(request(2, 4, 5));
  s.add(request(3, 9, 5));
  auto plan = s.plan_step();
  CHECK(ids_of(*plan) == std::vector<uint64_t>{2, 3});
  auto unknown = policies.create("lifo");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message ==
        "scheduler.policy: unknown policy 'lifo' (known: fcfs, priority, shortest_prompt_first)");
}

TEST_CASE("a topology runs the plugin policy and the priority policy - outputs stay exact", "[engine][policy][plugin]") {
  for (const std::string policy : {"shortest_prompt_first", "priority"}) {
    TopologyOverrides o;
    o.set = {"scheduler.policy=" + policy, "engine.max_num_seqs=2"};
    const std::string yaml = std::string("model: {path: ") + test::stories_dir().string() + "}\nplugins: [" +
                             ACTORD_SPF_PLUGIN + "]\ngroups: [{name: main}]\n";
    auto cfg = parse_topology(yaml, "inline.yaml", o);
    REQUIRE(cfg.ok());
    auto engine = test::start_engine(*cfg);
    const auto reference = test::reference_ids();
    std::vector<GenerateRequest> requests;
    for (int i = 0; i < 5; ++i) {
      GenerateRequest r;
      r.prompt_ids = {1};
      r.prompt_ids.insert(r.prompt_ids.end(), reference.begin(), reference.begin() + 10 * (5 - i));
      r.max_tokens = 20;
      r.sampling.temperature = 0;
      r.priority = i % 3;
      requests.push_back(r);
    }
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    for (int i = 0; i < 5; ++i) {
      REQUIRE_FALSE((*out)[i].error);
      const size_t start = 10 * (5 - i);
      CHECK((*out)[i].generated_ids == std::vector<int32_t>(reference.begin() + start, reference.begin() + start + 20));
    }
  }
  // An unknown policy is refused before anything starts.
  TopologyOverrides o;
  o.set = {"scheduler.policy=lifo"};
  auto cfg = load_topology(test::source_dir() / "configs/quickstart.yaml", o);
  REQUIRE(cfg.ok());
  auto engine = Engine::start(*cfg);
  REQUIRE_FALSE(engine.ok());
  CHECK_THAT(engine.error().message, Catch::Contains("scheduler.policy: unknown policy 'lifo' (known: fcfs, priority"));
}

TEST_CASE("policies never stall - random load on a tiny pool, steps planned ahead, as the actor drives them",
          "[scheduler][policy]") {
  for (const std::string name : {"fcfs", "priority"}) {
    INFO("policy " << name);
    PolicyRegistry policies = PolicyRegistry::with_builtins();
    BlockAllocator blocks(8);
    SchedulerLimits limits{32, 64, 16, 512, 0};
    auto policy = policies.create(name);
    REQUIRE(policy.ok());
    BatchScheduler s(limits, blocks, std::move(policy.value()));
    std::mt19937_64 rng(7);
    for (uint64_t id = 1; id <= 300; ++id) {
      auto r = request(id, 1 + static_cast<int>(rng() % 60), 1 + static_cast<uint32_t>(rng() % 48),
                       static_cast<int32_t>(rng() % 4));
      REQUIRE_FALSE(s.add(r));
    }
    std::deque<std::vector<uint64_t>> in_flight;
    size_t finished = 0, steps = 0;
    while (s.has_work() || !in_flight.empty()) {
      while (const StepPlan* plan = s.plan_step()) {
        std::vector<uint64_t> sampled;
        for (const auto& slice : plan->slices)
          if (slice.sample) sampled.push_back(slice.seq_id);
        in_flight.push_back(std::move(sampled));
      }
      INFO("step " << steps << " waiting " << s.num_waiting() << " running " << s.num_running());
      REQUIRE_FALSE(in_flight.empty());  // work left but nothing planned and nothing to wait for: a stall
      std::vector<StepSample> samples;
      for (uint64_t id : in_flight.front()) samples.push_back(StepSample{id, static_cast<int32_t>(rng() % 500), {}});
      in_flight.pop_front();
      for (const auto& u : s.on_step_result(samples)) finished += u.finish != Finish::none;
      REQUIRE(++steps < 100000);
    }
    CHECK(finished == 300);
    CHECK(blocks.num_free() + s.prefix_cache_stats().cached_blocks == 8);
  }
}
