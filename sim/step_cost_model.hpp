// A replica's time per step as a function of the step's shape (scheduler/step_shape.hpp), fitted from steps the
// engine measured (a --trace's scheduler steps: their shape and their share of the wall clock).
//
// The model: us(step) = T(tokens) + per_pair_us * attention_pairs, with T piecewise linear in the step's tokens
// between knots at 1, 2, 4, ... up to the most tokens measured (and that count), extended past the last knot along
// its last segment. A CPU's products read every weight once per step however few rows it has (T flat at small
// batches) and become compute bound with more rows (T linear); attention grows with every row's context.
//
// Contract: pure. fit() solves a least-squares problem (Eigen) in relative terms: every step counts by its error as
// a fraction of the mean time of the steps of its size class (single steps jitter), with a small penalty on T's
// curvature so that knots without measurements follow their neighbours; per_pair_us is never negative (refitted
// without it otherwise). It refuses fewer than 8 steps, or steps of one size only. predict_us() is defined for any
// shape.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <vector>

#include "core/status.hpp"
#include "scheduler/step_shape.hpp"

namespace actord::sim {

// One step the engine ran: its shape and its share of the replica's wall clock, in microseconds.
struct MeasuredStep {
  StepShape shape;
  double us = 0;
};

class StepCostModel {
 public:
  struct Knot {
    double tokens = 0;
    double us = 0;
  };
  StepCostModel() = default;
  StepCostModel(std::vector<Knot> knots, double per_pair_us);

  // With a prior (a model of the same replica fitted elsewhere, e.g. on `actord calibrate`'s grid while `steps` come
  // from a served run's trace): each size class of tokens the steps lack, up to the prior's last knot, gets
  // kPriorSteps steps of the prior's time, scaled by the measured / prior ratio of the nearest class the steps have
  // (at the steps' mean attention pairs per token). The errors are those of `steps` alone.
  static constexpr int kPriorSteps = 8;
  static Result<StepCostModel> fit(std::span<const MeasuredStep> steps, const StepCostModel* prior = nullptr);

  double predict_us(const StepShape& shape) const;
  const std::vector<Knot>& knots() const { return knots_; }
  double per_pair_us() const { return per_pair_us_; }
  // The fit's median and 90th-percentile relative error (|predicted - measured| / measured) over the steps it was
  // fitted on; 0 for a model not made by fit().
  double median_error() const { return median_error_; }
  double p90_error() const { return p90_error_; }
  // (sum predicted - sum measured) / sum measured over those steps: the error in the replica's busy time.
  double total_error() const { return total_error_; }
  size_t num_steps() const { return num_steps_; }

  nlohmann::json to_json() const;
  // Errors name `where` and the key that is wrong.
  static Result<StepCostModel> from_json(const nlohmann::json& j, const std::string& where);

 private:
  double tokens_us(double tokens) const;  // T
  std::vector<Knot> knots_;  // tokens ascending, at least 2
  double per_pair_us_ = 0;
  double median_error_ = 0, p90_error_ = 0, total_error_ = 0;
  size_t num_steps_ = 0;
};

}  // namespace actord::sim
