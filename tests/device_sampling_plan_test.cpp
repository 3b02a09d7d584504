// The host plan of sampling on a device (executors/device_sampling_plan.hpp): which rows stay on the host, and that
// the penalty and mask operations, applied in order to a raw row, leave the row the CPU sampler draws from.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/sampling_options.hpp"
#include "executors/device_sampling_plan.hpp"
#include "executors/sampler.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

// What the device kernel does with the operations (device_sampler.cu), on the host.
void apply(const DeviceSamplingPlan& plan, size_t r, std::vector<float>& row) {
  const DeviceSampleParams& p = plan.params[r];
  for (int k = p.ops_first; k < p.ops_first + p.ops_count; ++k) {
    const DeviceSampleOp& op = plan.ops[size_t(k)];
    if (op.id < 0 || op.id >= int(row.size())) continue;
    float& l = row[size_t(op.id)];
    l = op.kind == DeviceSampleOp::kRepetition ? (l > 0.0f ? l / op.value : l * op.value)
        : op.kind == DeviceSampleOp::kSubtract ? l - op.value
                                               : -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

TEST_CASE("device sampling plan: penalties and masks as operations draw what the CPU sampler draws", "[sampler]") {
  constexpr int kVocab = 3000;
  PenaltyHistory history;
  const std::vector<int32_t> prompt{5, 17, 17, 2999, 40, 3000 /* outside: ignored */};
  history.add_prompt(prompt);
  for (int32_t id : {17, 40, 40, 41, 7}) history.add_output(id);
  const std::vector<int32_t> masked{2, 41, 999};

  std::vector<SamplingOptions> options(7);
  options[0].temperature = 0.0f;  // greedy after penalties
  options[0].repetition_penalty = 1.3f;
  options[1].temperature = 0.8f;  // a draw with every penalty
  options[1].repetition_penalty = 0.7f;
  options[1].frequency_penalty = 0.5f;
  options[1].presence_penalty = -0.4f;
  options[2].temperature = 1.1f;  // top-k, top-p, min-p, masks only
  options[2].top_k = 50;
  options[2].top_p = 0.9f;
  options[2].min_p = 0.01f;
  options[3].logprobs = 2;  // the host's: raw logprobs
  options[4].top_k = 2000;  // wider than the device's candidates: the host's
  options[5].top_k = 5000;  // not a cut (at least the vocabulary): the device's
  options[6].temperature = 0.9f;  // logit biases, then the penalties
  options[6].repetition_penalty = 1.2f;
  options[6].presence_penalty = 0.3f;
  options[6].logit_bias = {{5, 2.5f}, {40, -1.5f}, {1200, 4.0f}, {2999, -100.0f}};
  for (size_t i = 0; i < options.size(); ++i) options[i].seed = 11 + i;

  std::vector<SampleRequest> requests(options.size());
  for (size_t i = 0; i < options.size(); ++i) {
    requests[i].options = &options[i];
    requests[i].sample_index = uint32_t(3 * i);
    if (options[i].has_penalties()) requests[i].history = &history;
    if (i == 2 || i == 3) requests[i].masked_ids = masked;
  }
  DeviceSamplingPlan plan;
  plan_device_sampling(requests, kVocab, plan);
  REQUIRE(plan.params.size() == requests.size());
  CHECK(plan.params[3].host == 1);
  CHECK(plan.params[3].ops_count == 0);
  CHECK(plan.params[4].host == 1);
  for (size_t i : {0u, 1u, 2u, 5u, 6u}) CHECK(plan.params[i].host == 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    CHECK(plan.params[i].key == draw_key(options[i].seed, requests[i].sample_index));
    CHECK(plan.params[i].temperature == options[i].temperature);
    CHECK(plan.params[i].top_k == options[i].top_k);
  }
  // Repetition over the 7 ids seen (5 distinct in the prompt, 41 and 7 generated), then the 4 generated ids'
  // subtractions: their ops in that order.
  CHECK(plan.params[1].ops_count == 7 + 4);
  CHECK(plan.ops[size_t(plan.params[1].ops_first + 6)].kind == DeviceSampleOp::kRepetition);
  CHECK(plan.ops[size_t(plan.params[1].ops_first + 7)].kind == DeviceSampleOp::kSubtract);
  CHECK(plan.params[2].ops_count == 3);
  // The biases first (as subtractions of their negations), then the penalties.
  CHECK(plan.params[6].ops_count == 4 + 7 + 4);
  CHECK(plan.ops[size_t(plan.params[6].ops_first)].kind == DeviceSampleOp::kSubtract);
  CHECK(plan.ops[size_t(plan.params[6].ops_first)].value == -2.5f);
  CHECK(plan.ops[size_t(plan.params[6].ops_first + 4)].kind == DeviceSampleOp::kRepetition);

  // The operations applied to a raw row, then a request without history or masks, draw the same tokens as the
  // request with them on the raw row, for many rows (peaked and flat).
  Sampler sampler;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    for (size_t i : {0u, 1u, 2u, 5u, 6u}) {
      INFO("row seed " << seed << ", options " << i);
      std::mt19937 rng(seed);
      const std::vector<float> raw = test::random_vector(kVocab, rng, seed % 2 ? 4.0f : 0.5f);
      std::vector<float> with_request = raw, with_ops = raw;
      const SampledToken want = sampler.sample(with_request.data(), kVocab, requests[i]);
      apply(plan, i, with_ops);
      SampleRequest plain = requests[i];
      SamplingOptions unbiased = options[i];
      unbiased.logit_bias.clear();
      plain.options = &unbiased;
      plain.history = nullptr;
      plain.masked_ids = {};
      const SampledToken got = sampler.sample(with_ops.data(), kVocab, plain);
      CHECK(got.token == want.token);
      CHECK(with_ops == with_request);  // the same row, value for value
    }
  }
}
