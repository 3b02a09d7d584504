// The simulator's parsers of user files (sim/): a cost profile (CostProfile::from_json, what `actord simulate
// --profile` reads) and a trace's steps (steps_of_trace, what `actord calibrate --from-trace` reads). The input is
// one JSON document, given to both.
// Properties: neither crashes; a refusal has a message naming the file; an accepted profile predicts finite,
// non-negative step times for any shape, and its JSON reads back to the same predictions; a trace's steps either
// fit a cost model or are refused with a message, and a fitted model predicts finite, non-negative times for them.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.hpp"
#include "sim/cost_profile.hpp"
#include "sim/trace_steps.hpp"

using namespace actord;
using actord::fuzz::require;

namespace {

void check_predictions(const sim::StepCostModel& model, const std::string& what) {
  // {prefill, decode, attention pairs, sequences}
  for (const StepShape& s : {StepShape{0, 1, 1, 1}, StepShape{0, 64, 64 * 4096, 64},
                             StepShape{2048, 0, 2048 * 2049 / 2, 1}, StepShape{uint64_t{1} << 50, 0, UINT64_MAX, 1}}) {
    const double us = model.predict_us(s);
    require(std::isfinite(us) && us >= 0, what + ": a prediction that is negative or not finite");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded()) return 0;

  auto profile = sim::CostProfile::from_json(doc, "p.json");
  if (!profile) {
    require(profile.error().message.rfind("p.json", 0) == 0, "a profile refusal not naming the file");
  } else {
    auto again = sim::CostProfile::from_json(profile->to_json(), "p.json");
    require(again.ok() && again->replicas.size() == profile->replicas.size(), "a profile that does not read back");
    for (size_t i = 0; i < profile->replicas.size(); ++i) {
      check_predictions(profile->replicas[i].cost, "profile");
      const StepShape s{3, 7, 500, 8};
      require(again->replicas[i].cost.predict_us(s) == profile->replicas[i].cost.predict_us(s),
              "a profile whose JSON predicts differently");
    }
  }

  auto steps = sim::steps_of_trace(doc, 0, "t.json");
  if (!steps) {
    require(steps.error().message.rfind("t.json", 0) == 0, "a trace refusal not naming the file");
    return 0;
  }
  auto model = sim::StepCostModel::fit(*steps);
  if (!model) {
    require(!model.error().message.empty(), "a fit refused without a message");
    return 0;
  }
  check_predictions(*model, "fit");
  for (const sim::MeasuredStep& s : *steps) {
    const double us = model->predict_us(s.shape);
    require(std::isfinite(us) && us >= 0, "a fitted prediction that is negative or not finite");
  }
  return 0;
}
