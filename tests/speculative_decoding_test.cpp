// Speculative decoding by prompt lookup: the n-gram drafter, the scheduler's drafts and their verification in
// scripted timelines, and the whole engine giving exactly the tokens (and logprobs) it gives without drafts.
#include <catch2/catch.hpp>

#include "engine_test_util.hpp"
#include "scheduler/batch_scheduler.hpp"
#include "scheduler/ngram_drafter.hpp"
#include "scheduler_test_util.hpp"

using namespace actord;

namespace {

std::vector<int32_t> drafts_for(const std::vector<int32_t>& tokens, int max_drafts, int min_n = 1, int max_n = 4) {
  NgramDrafter drafter(min_n, max_n);
  std::vector<int32_t> out;
  drafter.propose(tokens, max_drafts, out);
  return out;
}

std::vector<int32_t> ids(std::span<const int32_t> span) { return {span.begin(), span.end()}; }

// Drafts at every chance: any repeated token, any batch size; and `more` overrides.
std::vector<std::string> drafting(std::vector<std::string> more = {}) {
  more.insert(more.begin(), {"speculative.method=ngram", "speculative.prompt_lookup_min=1",
                             "speculative.disable_by_batch_size=0"});
  return more;
}

SchedulerLimits speculating(int drafts = 4, int disable_by_batch_size = 0) {
  SchedulerLimits limits{8, 64, 4, 512, 0};
  limits.enable_prefix_caching = false;  // freed blocks go straight back (the engine tests cover the cache)
  limits.speculative = SpeculativeLimits{drafts, 1, 4, disable_by_batch_size};
  return limits;
}

// A request whose prompt repeats 10 11 12: its text drafts itself.
SequenceRequest repeating(uint64_t id, uint32_t max_tokens, std::vector<int32_t> stop = {}) {
  SequenceRequest r = test::request(id, 0, max_tokens, std::move(stop));
  r.prompt = {10, 11, 12, 10, 11, 12, 10, 11};
  return r;
}

// Answers the step's one slice with these samples (one per row it samples).
std::vector<SequenceUpdate> answer_rows(BatchScheduler& s, const StepPlan& plan, const std::vector<int32_t>& tokens) {
  REQUIRE(plan.slices.size() == 1);
  REQUIRE(tokens.size() == static_cast<size_t>(1 + plan.slices[0].drafts));
  std::vector<StepSample> sampled;
  for (int32_t t : tokens) sampled.push_back(StepSample{plan.slices[0].seq_id, t, std::nullopt});
  const auto updates = s.on_step_result(sampled);
  return {updates.begin(), updates.end()};
}

}  // namespace

TEST_CASE("n-gram drafter - the tokens after the latest earlier match of the longest suffix", "[speculative]") {
  // "1 2 3" occurred before, followed by 4 5: the longest suffix (3 tokens) decides over "3" alone (followed by 9).
  CHECK(drafts_for({1, 2, 3, 4, 5, 3, 9, 1, 2, 3}, 2) == std::vector<int32_t>{4, 5});
  // The latest of two earlier occurrences.
  CHECK(drafts_for({7, 8, 1, 7, 8, 2, 7, 8}, 1) == std::vector<int32_t>{2});
  // A match near the end repeats with its period: a loop predicts itself.
  CHECK(drafts_for({5, 6, 7, 5, 6, 7}, 5) == std::vector<int32_t>{5, 6, 7, 5, 6});
  CHECK(drafts_for({4, 4, 4}, 3) == std::vector<int32_t>{4, 4, 4});
  // No earlier occurrence of any suffix of min_n tokens or more: no drafts.
  CHECK(drafts_for({1, 2, 3, 4}, 4).empty());
  CHECK(drafts_for({1, 2, 9, 1, 3}, 4, 2, 4).empty());  // "3" and "1 3" are new; 1-grams are not matched
  CHECK(drafts_for({1, 2, 9, 1, 2}, 4, 2, 4) == std::vector<int32_t>{9, 1, 2, 9});
  CHECK(drafts_for({1}, 4).empty());
  CHECK(drafts_for({1, 2, 1}, 0).empty());
}

TEST_CASE("n-gram drafter - indexes incrementally as the sequence grows", "[speculative]") {
  NgramDrafter drafter(1, 3);
  std::vector<int32_t> tokens{3, 1, 4, 1, 5};
  std::vector<int32_t> out;
  drafter.propose(tokens, 2, out);
  CHECK(out.empty());  // "5" is new
  for (int32_t t : {9, 2, 6, 3, 1}) tokens.push_back(t);
  drafter.propose(tokens, 3, out);
  CHECK(out == std::vector<int32_t>{4, 1, 5});  // "3 1" occurred at the start
  // The same answer as a drafter that sees the whole list at once.
  CHECK(out == drafts_for(tokens, 3, 1, 3));
  // A long history costs nothing more per proposal: the index holds every n-gram once.
  for (int i = 0; i < 20000; ++i) tokens.push_back(100 + i % 997);
  drafter.propose(tokens, 4, out);
  CHECK(out == drafts_for(tokens, 4, 1, 3));
  CHECK(out.size() == 4);
}

TEST_CASE("speculative decoding - drafts ride the decode slice and the confirmed ones are kept",
          "[speculative][scheduler]") {
  BlockAllocator blocks(32);
  BatchScheduler s(speculating(), blocks);
  REQUIRE_FALSE(s.add(repeating(1, 20)));
  const StepPlan* plan = s.plan_step();
  REQUIRE(plan);
  CHECK(plan->slices[0].drafts == 0);  // the prompt: no drafts while prefilling
  test::answer(s, *plan, 12);          // 10 11 12 10 11 12 10 11 | 12

  plan = s.plan_step();
  REQUIRE(plan);
  const PlannedSlice& slice = plan->slices[0];
  CHECK(slice.drafts == 4);
  CHECK(ids(slice.tokens) == std::vector<int32_t>{12, 10, 11, 12, 10});  // the last token, then the drafts
  CHECK(slice.num_tokens == 5);
  CHECK(slice.start_pos == 8);
  CHECK(slice.sample);
  CHECK(slice.sample_index == 1);
  CHECK(slice.block_table.size() == 4);  // positions 0 .. 12 in blocks of 4
  CHECK(plan->num_drafts == 4);
  CHECK(plan->num_samples == 5);
  CHECK(plan->decode_only());
  CHECK_FALSE(s.plan_step());  // never ahead of a step with drafts

  // Every draft confirmed: five tokens in one step.
  auto updates = answer_rows(s, *plan, {10, 11, 12, 10, 11});
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{10, 11, 12, 10, 11});
  CHECK(s.num_draft_tokens() == 4);
  CHECK(s.num_accepted_drafts() == 4);

  // The second draft is rejected: the first is kept, then the sample that differs; the KV positions of the rest
  // are computed again from there.
  plan = s.plan_step();
  REQUIRE(plan);
  CHECK(plan->slices[0].start_pos == 13);
  CHECK(plan->slices[0].sample_index == 6);
  REQUIRE(plan->slices[0].drafts == 4);
  CHECK(ids(plan->slices[0].tokens) == std::vector<int32_t>{11, 12, 10, 11, 12});
  updates = answer_rows(s, *plan, {12, 77, 5, 5, 5});
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].new_tokens == std::vector<int32_t>{12, 77});
  CHECK(s.num_draft_tokens() == 8);
  CHECK(s.num_accepted_drafts() == 5);

  plan = s.plan_step();
  REQUIRE(plan);
  CHECK(plan->slices[0].start_pos == 15);
  CHECK(plan->slices[0].sample_index == 8);
  CHECK(plan->slices[0].drafts == 0);  // 77 never occurred before
  CHECK(ids(plan->slices[0].tokens) == std::vector<int32_t>{77});
}

TEST_CASE("speculative decoding - a stop id or max_tokens among the drafts ends the sequence there",
          "[speculative][scheduler]") {
  SECTION("stop id") {
    BlockAllocator blocks(32);
    BatchScheduler s(speculating(), blocks);
    s.add(repeating(1, 20, {11}));
    test::answer(s, *s.plan_step(), 12);
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan->slices[0].drafts == 4);
    const auto updates = answer_rows(s, *plan, {10, 11, 12, 10, 11});
    REQUIRE(updates.size() == 1);
    CHECK(updates[0].new_tokens == std::vector<int32_t>{10, 11});
    CHECK(updates[0].finish == Finish::stop);
    CHECK(blocks.num_free() == 32);
    CHECK_FALSE(s.has_work());
  }
  SECTION("max_tokens bounds the drafts") {
    BlockAllocator blocks(32);
    BatchScheduler s(speculating(), blocks);
    s.add(repeating(1, 4));
    test::answer(s, *s.plan_step(), 12);  // 1 generated, 3 to go: 2 drafts and the sample after them
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan->slices[0].drafts == 2);
    const auto updates = answer_rows(s, *plan, {10, 11, 12});
    REQUIRE(updates.size() == 1);
    CHECK(updates[0].new_tokens == std::vector<int32_t>{10, 11, 12});
    CHECK(updates[0].finish == Finish::length);
    CHECK(blocks.num_free() == 32);
  }
  SECTION("the context bounds the drafts") {
    BlockAllocator blocks(32);
    SchedulerLimits limits = speculating();
    limits.max_model_len = 11;  // 9 tokens known: one draft, then the sample after it fills the context
    BatchScheduler s(limits, blocks);
    s.add(repeating(1, 20));
    test::answer(s, *s.plan_step(), 12);
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan->slices[0].drafts == 1);
    const auto updates = answer_rows(s, *plan, {10, 11});
    CHECK(updates[0].new_tokens == std::vector<int32_t>{10, 11});
    CHECK(updates[0].finish == Finish::length);
  }
}

TEST_CASE("speculative decoding - no drafts before a fork, for large batches, without blocks",
          "[speculative][scheduler]") {
  BlockAllocator blocks(64);
  SECTION("n > 1 before its fork; penalties draft") {
    BatchScheduler s(speculating(), blocks);
    SequenceRequest penalised = repeating(1, 20);
    penalised.sampling.repetition_penalty = 1.3f;
    SequenceRequest forked = repeating(2, 20);
    forked.sampling.n = 2;
    forked.sampling.temperature = 1.0f;
    forked.sampling.seed = 5;
    s.add(penalised);
    s.add(forked);
    const StepPlan* plan = s.plan_step();  // both prefilled; request 2 forks into 2 and 3 at its sample
    REQUIRE(plan->slices.size() == 2);
    CHECK(plan->slices[1].forks == 2);
    std::vector<StepSample> sampled{{1, 12, std::nullopt}, {2, 12, std::nullopt}, {3, 12, std::nullopt}};
    s.on_step_result(sampled);
    plan = s.plan_step();
    REQUIRE(plan->slices.size() == 3);
    CHECK(plan->slices[0].drafts == 4);  // the worker's penalty history follows each row
    CHECK(plan->slices[1].drafts == 4);  // the forks are sequences of their own now
    CHECK(plan->slices[2].seq_id == 3);
    CHECK(plan->slices[2].drafts == 4);
  }
  SECTION("disable_by_batch_size") {
    BatchScheduler s(speculating(4, 2), blocks);
    s.add(repeating(1, 20));
    s.add(repeating(2, 20));
    test::answer(s, *s.plan_step(), 12);
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan->slices.size() == 2);
    CHECK(plan->slices[0].drafts == 0);
    CHECK(plan->slices[1].drafts == 0);
  }
  SECTION("no blocks for the drafts: one token, nobody preempted") {
    BlockAllocator few(3);  // a lease of 12 positions: the prompt and its first token fit, four drafts do not
    SchedulerLimits limits = speculating();
    limits.pool_blocks = 64;  // (the pool is larger: the context does not bound the drafts)
    BatchScheduler s(limits, few);
    s.add(repeating(1, 20));
    test::answer(s, *s.plan_step(), 12);
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan->slices.size() == 1);
    CHECK(plan->slices[0].drafts == 0);
    CHECK(s.num_preemptions() == 0);
  }
}

TEST_CASE("speculative decoding - the whole engine gives the 256-token reference in fewer steps",
          "[speculative][engine]") {
  for (const char* file : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml", "configs/tp2.yaml",
                           "configs/pp2.yaml", "configs/afd.yaml"}) {
    INFO(file);
    auto engine = test::start_engine(test::quickstart(file, drafting()));
    GenerateRequest r;
    r.prompt_ids = {1};
    r.max_tokens = 256;
    r.sampling.temperature = 0.0f;
    const auto before = engine->stats();
    auto out = engine->generate({r});
    REQUIRE(out.ok());
    REQUIRE_FALSE((*out)[0].error);
    CHECK((*out)[0].generated_ids == test::reference_ids());
    const EngineStats s = stats_between(*before, *engine->stats());
    INFO(s.steps << " steps, " << s.accepted_draft_tokens << " of " << s.draft_tokens << " drafts kept");
    CHECK(s.draft_tokens > 0);
    CHECK(s.accepted_draft_tokens > 0);
    CHECK(s.steps + s.accepted_draft_tokens == 256);  // each step: its drafts kept and one token more
    CHECK(s.sampled_tokens == 256);
    CHECK(s.steps < 256);
  }
}

TEST_CASE("speculative decoding - batched, prefix-cached and preempted requests keep their exact outputs",
          "[speculative][engine]") {
  SECTION("prefix cache and batching") {
    auto engine = test::start_engine(test::quickstart("configs/quickstart.yaml", drafting()));
    const auto requests = test::reference_prefix_requests();
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    test::check_continues_reference(*out, requests, requests.size());
    CHECK(engine->stats()->accepted_draft_tokens > 0);
  }
  SECTION("a KV cache too small for the batch") {
    auto engine = test::start_engine(
        test::quickstart("configs/quickstart.yaml",
                         drafting({"engine.kv_cache_memory=80KiB", "scheduler.plan_ahead=false"})));
    const auto ref = test::reference_ids();
    std::vector<GenerateRequest> requests;
    for (int cut = 0; cut < 6; ++cut) {
      GenerateRequest r;
      r.prompt_ids = {1};
      r.prompt_ids.insert(r.prompt_ids.end(), ref.begin(), ref.begin() + cut * 2);
      r.max_tokens = 40;
      r.sampling.temperature = 0.0f;
      requests.push_back(r);
    }
    // Drafts need blocks, which this pool rarely has to spare (how often depends on when the requests arrive and
    // the lease grows): run the batch until some drafts were kept, every output checked each time.
    for (int round = 0; round < 5 && engine->stats()->accepted_draft_tokens == 0; ++round) {
      auto out = engine->generate(requests);
      REQUIRE(out.ok());
      for (size_t i = 0; i < requests.size(); ++i) {
        REQUIRE_FALSE((*out)[i].error);
        CHECK((*out)[i].generated_ids == std::vector<int32_t>(ref.begin() + i * 2, ref.begin() + i * 2 + 40));
      }
    }
    const auto stats = engine->stats();
    CHECK(stats->preemptions > 0);
    CHECK(stats->accepted_draft_tokens > 0);
  }
}

namespace {

// Each output of `requests` from an engine with drafts at every chance equals the one from an engine without (both
// with `set`); the drafting engine kept some drafts.
void check_same_with_drafts(const std::vector<GenerateRequest>& requests, const std::vector<std::string>& set = {}) {
  std::vector<std::vector<GenerateOutput>> runs;
  for (const bool drafts : {false, true}) {
    INFO((drafts ? "with drafts" : "without"));
    auto engine = test::start_engine(test::quickstart("configs/quickstart-2proc.yaml", drafts ? drafting(set) : set));
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    runs.push_back(std::move(*out));
    if (drafts) CHECK(engine->stats()->accepted_draft_tokens > 0);
  }
  REQUIRE(runs[0].size() == runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    INFO("output " << i << ": " << runs[0][i].text);
    REQUIRE_FALSE(runs[0][i].error);
    REQUIRE_FALSE(runs[1][i].error);
    CHECK(runs[1][i].generated_ids == runs[0][i].generated_ids);
    CHECK(runs[1][i].text == runs[0][i].text);
    CHECK(runs[1][i].finish_reason == runs[0][i].finish_reason);
    REQUIRE(runs[1][i].logprobs.size() == runs[0][i].logprobs.size());
    for (size_t t = 0; t < runs[0][i].logprobs.size(); ++t) {
      CHECK(runs[1][i].logprobs[t].logprob == runs[0][i].logprobs[t].logprob);
      CHECK(runs[1][i].logprobs[t].top_ids == runs[0][i].logprobs[t].top_ids);
      CHECK(runs[1][i].logprobs[t].top_logprobs == runs[0][i].logprobs[t].top_logprobs);
    }
    REQUIRE(runs[1][i].prompt_logprobs.size() == runs[0][i].prompt_logprobs.size());
    for (size_t t = 0; t < runs[0][i].prompt_logprobs.size(); ++t) {
      CHECK(runs[1][i].prompt_logprobs[t].logprob == runs[0][i].prompt_logprobs[t].logprob);
      CHECK(runs[1][i].prompt_logprobs[t].top_ids == runs[0][i].prompt_logprobs[t].top_ids);
    }
  }
}

}  // namespace

TEST_CASE("speculative decoding - penalties and response formats see each row's drafts: the same outputs",
          "[speculative][engine][structured]") {
  std::vector<GenerateRequest> requests;
  auto add = [&](float temperature, auto&& set) {
    GenerateRequest r;
    r.prompt = "Once upon a time";
    r.max_tokens = 100;
    r.sampling.temperature = temperature;
    r.sampling.seed = 7 + requests.size();
    set(r);
    requests.push_back(r);
  };
  add(0.0f, [](GenerateRequest& r) { r.sampling.repetition_penalty = 1.1f; });
  add(0.9f, [](GenerateRequest& r) { r.sampling.frequency_penalty = 0.3f; r.sampling.presence_penalty = 0.2f; });
  add(0.0f, [](GenerateRequest& r) { r.sampling.response_format = ResponseFormat::json_object; });
  add(1.0f, [](GenerateRequest& r) { r.sampling.response_format = ResponseFormat::json_object; });
  add(0.0f, [](GenerateRequest& r) {
    r.sampling.response_format = ResponseFormat::json_schema;
    r.sampling.json_schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
        "pet": {"enum": ["cat", "dog"]}, "age": {"type": "integer"}}, "required": ["name", "pet", "age"]})";
  });
  add(0.0f, [](GenerateRequest& r) { r.sampling.repetition_penalty = 1.3f; r.sampling.logprobs = 2; });
  check_same_with_drafts(requests);
}

TEST_CASE("speculative decoding - a step that verifies drafts beside a chunked prompt with prompt logprobs",
          "[speculative][engine]") {
  // A decodes from a prompt that repeats itself (it drafts from its first step on) while B's prompt, with prompt
  // logprobs, is fed in chunks of a small token budget: steps carry draft rows and all of a prompt chunk's rows.
  const auto ref = test::reference_ids();
  GenerateRequest a;
  a.prompt_ids = {1};
  for (int copy = 0; copy < 2; ++copy) a.prompt_ids.insert(a.prompt_ids.end(), ref.begin(), ref.begin() + 30);
  a.max_tokens = 60;
  a.sampling.temperature = 0.0f;
  GenerateRequest b;
  b.prompt_ids = {1};
  b.prompt_ids.insert(b.prompt_ids.end(), ref.begin() + 40, ref.begin() + 160);
  b.max_tokens = 8;
  b.sampling.temperature = 0.0f;
  b.sampling.prompt_logprobs = 2;
  b.sampling.logprobs = 1;
  check_same_with_drafts({a, b}, {"engine.max_num_batched_tokens=24", "engine.enable_prefix_caching=false"});
}

TEST_CASE("speculative decoding - sampled tokens and logprobs equal the run without drafts", "[speculative][engine]") {
  std::vector<GenerateRequest> requests;
  auto add = [&](auto&& set) {
    GenerateRequest r;
    r.prompt = "Once upon a time";
    r.max_tokens = 80;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = 100 + requests.size();
    set(r);
    requests.push_back(r);
  };
  add([](GenerateRequest& r) { r.sampling.top_k = 20; });
  add([](GenerateRequest& r) { r.sampling.top_p = 0.9f; r.sampling.logprobs = 3; });
  add([](GenerateRequest& r) { r.sampling.min_p = 0.05f; r.sampling.min_tokens = 60; });
  add([](GenerateRequest& r) { r.sampling.n = 2; });
  add([](GenerateRequest& r) { r.sampling.repetition_penalty = 1.2f; });
  add([](GenerateRequest& r) { r.stop = {" the"}; });
  add([](GenerateRequest& r) { r.sampling.temperature = 0.0f; r.sampling.logprobs = 2; r.max_tokens = 120; });
  check_same_with_drafts(requests);
}

TEST_CASE("speculative decoding - bad settings are refused naming the key", "[speculative][config]") {
  auto refused = [](const std::string& set) {
    TopologyOverrides o;
    o.set = {set};
    auto cfg = load_topology(test::source_dir() / "configs/quickstart.yaml", o);
    REQUIRE_FALSE(cfg.ok());
    return cfg.error().message;
  };
  CHECK_THAT(refused("speculative.method=eagle"), Catch::Contains("speculative.method"));
  CHECK_THAT(refused("speculative.num_speculative_tokens=0"), Catch::Contains("speculative.num_speculative_tokens"));
  CHECK_THAT(refused("speculative.prompt_lookup_min=0"), Catch::Contains("speculative.prompt_lookup_min"));
  CHECK_THAT(refused("speculative.prompt_lookup_max=0"), Catch::Contains("speculative.prompt_lookup_max"));
  CHECK_THAT(refused("speculative.disable_by_batch_size=-1"), Catch::Contains("speculative.disable_by_batch_size"));
  CHECK_THAT(refused("speculative.draft_model=x"), Catch::Contains("speculative.draft_model"));
  TopologyOverrides o;
  o.set = {"speculative.method=ngram", "speculative.num_speculative_tokens=6", "speculative.prompt_lookup_max=3"};
  auto cfg = load_topology(test::source_dir() / "configs/quickstart.yaml", o);
  REQUIRE(cfg.ok());
  CHECK(cfg->speculative.enabled());
  CHECK(cfg->speculative.num_speculative_tokens == 6);
  CHECK(cfg->speculative.prompt_lookup_max == 3);
  CHECK_FALSE(test::quickstart().speculative.enabled());
}

TEST_CASE("speculative decoding - plans ahead until the text repeats itself, then verifies drafts step by step",
          "[speculative][scheduler]") {
  BlockAllocator blocks(64);
  SchedulerLimits limits = speculating();
  BatchScheduler s(limits, blocks);
  SequenceRequest r = test::request(1, 3, 30);  // 10 11 12: no repeats yet
  s.add(r);
  const StepPlan* first = s.plan_step();
  REQUIRE(first);
  const StepPlan* second = s.plan_step();  // planned ahead: nothing to draft from
  REQUIRE(second);
  CHECK(second->planned_ahead);
  CHECK(second->slices[0].from_previous == 0);
  test::answer(s, *first, 10);               // 10 11 12 10: "10" occurred before, followed by 11
  CHECK_FALSE(s.plan_step());                // the next slice wants drafts: the plan waits for the token in flight
  test::answer(s, *second, 11);              // 10 11 12 10 11
  const StepPlan* third = s.plan_step();
  REQUIRE(third);
  CHECK_FALSE(third->planned_ahead);
  CHECK(third->slices[0].drafts == 4);
  CHECK(ids(third->slices[0].tokens) == std::vector<int32_t>{11, 12, 10, 11, 12});
  CHECK_FALSE(s.plan_step());                // never ahead of a step with drafts
}
