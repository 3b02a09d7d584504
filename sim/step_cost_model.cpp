#include "sim/step_cost_model.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <bit>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

namespace actord::sim {
namespace {

constexpr size_t kMinSteps = 8;
constexpr double kMaxTokens = double(uint64_t{1} << 40);  // a knot's tokens at most (steps are far smaller)
constexpr double kCurvature = 0.05;  // weight of T's slope changes against the steps' relative errors

// Knots at 1, 2, 4, ... below `most` tokens, and `most`.
std::vector<double> knot_positions(double most) {
  std::vector<double> at;
  for (double x = 1; x < most; x *= 2) at.push_back(x);
  at.push_back(most);
  return at;
}

// Where `tokens` falls between the knots: the segment's first knot and the weight of the second (extrapolated past
// either end along the first or last segment).
std::pair<size_t, double> segment_of(const std::vector<double>& at, double tokens) {
  size_t i = 0;
  while (i + 2 < at.size() && tokens > at[i + 1]) ++i;
  return {i, (tokens - at[i]) / (at[i + 1] - at[i])};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * double(v.size() - 1) + 0.5))];
}

}  // namespace

StepCostModel::StepCostModel(std::vector<Knot> knots, double per_pair_us)
    : knots_(std::move(knots)), per_pair_us_(per_pair_us) {}

namespace {

// A step the fit can use: some tokens (at most kMaxTokens), a positive finite time.
bool usable(const MeasuredStep& s) {
  return s.shape.tokens() > 0 && double(s.shape.tokens()) <= kMaxTokens && s.us > 0 && std::isfinite(s.us);
}

size_t size_class(uint64_t tokens) { return size_t(std::bit_width(tokens)); }  // 1: 1, 2: 2-3, 3: 4-7, ...

// `steps` and, for each size class they lack up to the prior's last knot, the prior's steps scaled as the nearest
// class they have measured it (see fit()).
std::vector<MeasuredStep> with_prior(std::span<const MeasuredStep> steps, const StepCostModel& prior) {
  std::vector<MeasuredStep> all(steps.begin(), steps.end());
  const size_t classes = size_class(uint64_t(prior.knots().back().tokens)) + 1;
  std::vector<double> measured(classes, 0), predicted(classes, 0);
  double pairs = 0, tokens = 0;
  for (const MeasuredStep& s : steps) {
    if (!usable(s)) continue;
    const size_t c = size_class(s.shape.tokens());
    if (c < classes) {
      measured[c] += s.us;
      predicted[c] += prior.predict_us(s.shape);
    }
    pairs += double(s.shape.attention_pairs);
    tokens += double(s.shape.tokens());
  }
  const double pairs_per_token = tokens > 0 ? pairs / tokens : 0;
  for (size_t c = 1; c < classes; ++c) {
    if (measured[c] > 0) continue;
    std::optional<double> ratio;
    for (size_t d = 1; d < classes && !ratio; ++d) {
      for (const size_t n : {c - d, c + d})  // below first (c - d wraps past 0 to a huge index: skipped)
        if (!ratio && n < classes && measured[n] > 0 && predicted[n] > 0) ratio = measured[n] / predicted[n];
    }
    if (!ratio) return all;  // nothing measured to scale by
    StepShape shape;
    // The class's middle, or the prior's last knot in the class that holds it.
    shape.decode_tokens = std::min((uint64_t{1} << (c - 1)) + (uint64_t{1} << (c - 1)) / 2,
                                   uint64_t(prior.knots().back().tokens));
    shape.attention_pairs = uint64_t(pairs_per_token * double(shape.decode_tokens));
    shape.sequences = shape.decode_tokens;
    for (int i = 0; i < StepCostModel::kPriorSteps; ++i) all.push_back({shape, *ratio * prior.predict_us(shape)});
  }
  return all;
}

}  // namespace

Result<StepCostModel> StepCostModel::fit(std::span<const MeasuredStep> measured, const StepCostModel* prior) {
  const bool use_prior = prior && prior->knots().size() >= 2;
  const std::vector<MeasuredStep> filled = use_prior ? with_prior(measured, *prior) : std::vector<MeasuredStep>{};
  const std::span<const MeasuredStep> steps = use_prior ? std::span<const MeasuredStep>(filled) : measured;
  double most = 0, least = 0;
  std::vector<double> times;
  for (const MeasuredStep& s : steps) {
    if (!usable(s)) continue;
    const double tokens = double(s.shape.tokens());
    most = std::max(most, tokens);
    least = times.empty() ? tokens : std::min(least, tokens);
    times.push_back(s.us);
  }
  if (times.size() < kMinSteps)
    return Error{Errc::invalid_argument, "too few steps to fit a cost model: " + std::to_string(times.size()) +
                                             " with tokens and time, at least " + std::to_string(kMinSteps)};
  if (least == most)
    return Error{Errc::invalid_argument, "every step measured had " + std::to_string(int64_t(most)) +
                                             " tokens: a cost model needs steps of several sizes"};
  const std::vector<double> at = knot_positions(std::max(most, 2.0));
  const double scale = percentile(times, 50);
  const size_t knots = at.size();
  // Each step's weight: one over the mean time of the steps of its size class (tokens rounded to a power of two).
  // A single step's share jitters with the threads' wake-ups; relative to its class's mean, large and small
  // classes count alike without the jitter of small steps dominating.
  std::vector<double> class_sum(65, 0), class_count(65, 0);  // classes 0 .. 64
  for (const MeasuredStep& s : steps) {
    if (!usable(s)) continue;
    class_sum[size_class(s.shape.tokens())] += s.us;
    class_count[size_class(s.shape.tokens())] += 1;
  }
  auto weight = [&](const MeasuredStep& s) {
    const size_t c = size_class(s.shape.tokens());
    return class_count[c] / class_sum[c];
  };
  auto solve = [&](bool with_pairs) {
    const size_t cols = knots + (with_pairs ? 1 : 0);
    const size_t curvature_rows = knots > 2 ? knots - 2 : 0;
    Eigen::MatrixXd A = Eigen::MatrixXd::Zero(Eigen::Index(times.size() + curvature_rows), Eigen::Index(cols));
    Eigen::VectorXd b = Eigen::VectorXd::Zero(A.rows());
    Eigen::Index row = 0;
    for (const MeasuredStep& s : steps) {
      if (!usable(s)) continue;
      const auto [i, w] = segment_of(at, double(s.shape.tokens()));
      const double k = weight(s);
      A(row, Eigen::Index(i)) = (1 - w) * k;
      A(row, Eigen::Index(i + 1)) = w * k;
      if (with_pairs) A(row, Eigen::Index(knots)) = double(s.shape.attention_pairs) * k;
      b(row) = s.us * k;
      ++row;
    }
    // Slope changes between consecutive segments, in units of the median step over the segments' span.
    for (size_t i = 1; i + 1 < knots; ++i, ++row) {
      const double left = at[i] - at[i - 1], right = at[i + 1] - at[i], span = at[i + 1] - at[i - 1];
      const double k = kCurvature * span / scale / 2;
      A(row, Eigen::Index(i - 1)) = k / left;
      A(row, Eigen::Index(i)) = -k / left - k / right;
      A(row, Eigen::Index(i + 1)) = k / right;
    }
    return Eigen::VectorXd(A.colPivHouseholderQr().solve(b));
  };
  Eigen::VectorXd x = solve(true);
  double per_pair = x(Eigen::Index(knots));
  if (!(per_pair >= 0)) {
    x = solve(false);
    per_pair = 0;
  }
  std::vector<Knot> fitted;
  for (size_t i = 0; i < knots; ++i) fitted.push_back({at[i], x(Eigen::Index(i))});
  StepCostModel model(std::move(fitted), per_pair);
  std::vector<double> errors;
  double predicted_us = 0, measured_us = 0;
  for (const MeasuredStep& s : measured) {
    if (!usable(s)) continue;
    errors.push_back(std::abs(model.predict_us(s.shape) - s.us) / s.us);
    predicted_us += model.predict_us(s.shape);
    measured_us += s.us;
  }
  model.median_error_ = percentile(errors, 50);
  model.p90_error_ = percentile(errors, 90);
  model.total_error_ = measured_us > 0 ? (predicted_us - measured_us) / measured_us : 0;
  model.num_steps_ = errors.size();
  return model;
}

double StepCostModel::tokens_us(double tokens) const {
  std::vector<double> at;
  at.reserve(knots_.size());
  for (const Knot& k : knots_) at.push_back(k.tokens);
  const auto [i, w] = segment_of(at, tokens);
  return (1 - w) * knots_[i].us + w * knots_[i + 1].us;
}

double StepCostModel::predict_us(const StepShape& shape) const {
  if (knots_.size() < 2 || shape.tokens() == 0) return 0;
  return std::max(0.0, tokens_us(double(shape.tokens())) + per_pair_us_ * double(shape.attention_pairs));
}

nlohmann::json StepCostModel::to_json() const {
  nlohmann::json knots = nlohmann::json::array();
  for (const Knot& k : knots_) knots.push_back({k.tokens, k.us});
  return {{"knots", knots},
          {"per_pair_us", per_pair_us_},
          {"steps", num_steps_},
          {"median_error", median_error_},
          {"p90_error", p90_error_},
          {"total_error", total_error_}};
}

Result<StepCostModel> StepCostModel::from_json(const nlohmann::json& j, const std::string& where) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error{Errc::invalid_argument, where + "." + key + ": " + what};
  };
  if (!j.is_object()) return Error{Errc::invalid_argument, where + ": expected an object"};
  const auto knots = j.find("knots");
  if (knots == j.end() || !knots->is_array() || knots->size() < 2)
    return bad("knots", "expected a list of at least 2 [tokens, us] pairs");
  std::vector<Knot> parsed;
  for (size_t i = 0; i < knots->size(); ++i) {
    const auto& k = (*knots)[i];
    if (!k.is_array() || k.size() != 2 || !k[0].is_number() || !k[1].is_number() ||
        !std::isfinite(k[0].get<double>()) || !std::isfinite(k[1].get<double>()))
      return bad("knots[" + std::to_string(i) + "]", "expected [tokens, us], two finite numbers");
    const double tokens = k[0].get<double>();
    if (!(tokens >= 1 && tokens <= kMaxTokens) || (!parsed.empty() && tokens <= parsed.back().tokens))
      return bad("knots[" + std::to_string(i) + "]", "tokens must be in [1, 2^40] and ascending");
    parsed.push_back({tokens, k[1].get<double>()});
  }
  const auto pair = j.find("per_pair_us");
  if (pair == j.end() || !pair->is_number() || !(pair->get<double>() >= 0) || !std::isfinite(pair->get<double>()))
    return bad("per_pair_us", "expected a finite number >= 0");
  StepCostModel model(std::move(parsed), pair->get<double>());
  // The fit's report, for people: a value of another type reads as none.
  for (auto [key, out] : {std::pair{"median_error", &model.median_error_}, {"p90_error", &model.p90_error_},
                          {"total_error", &model.total_error_}})
    if (const auto v = j.find(key); v != j.end() && v->is_number()) *out = v->get<double>();
  if (const auto v = j.find("steps"); v != j.end() && v->is_number_unsigned()) model.num_steps_ = v->get<size_t>();
  return model;
}

}  // namespace actord::sim
