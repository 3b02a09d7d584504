// Sampler against a plain double-precision reference of each rule (sort the whole vocabulary, filter in vLLM's order,
// walk), plus the previous implementation's seeded draws, BatchSampler determinism, PenaltyHistory and validate().
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/sampling_options.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "executors/device_sampling_plan.hpp"
#include "executors/sampler.hpp"

using namespace actord;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<float> random_logits(int vocab, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& l : logits) l = normal(gen);
  return logits;
}

SamplingOptions options(float temperature, float top_p = 1.0f, int32_t top_k = 0, uint64_t seed = 0,
                        float min_p = 0.0f) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_p = top_p;
  o.top_k = top_k;
  o.seed = seed;
  o.min_p = min_p;
  return o;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double draw_u(const SamplingOptions& o, uint32_t sample_index) {
  return uniform_from_key(o.seed * 0x100000001b3ull ^ (uint64_t(sample_index) + 1) * 0x9e3779b97f4a7c15ull);
}

int32_t reference_argmax(const std::vector<double>& logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < int32_t(logits.size()); ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

struct Ranked {
  double logit;  // temperature-scaled
  int32_t id;
  double p;  // renormalised probability among the tokens kept so far
};

// The tokens that survive min-p, top-k and top-p, in rank order, with probabilities renormalised after each filter.
std::vector<Ranked> reference_kept(const std::vector<double>& logits, const SamplingOptions& o) {
  std::vector<Ranked> c;
  for (int32_t i = 0; i < int32_t(logits.size()); ++i) c.push_back({logits[i] / o.temperature, i, 0.0});
  std::sort(c.begin(), c.end(),
            [](auto& a, auto& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
  auto renormalise = [&] {
    double sum = 0.0;
    for (auto& r : c) sum += (r.p = std::exp(r.logit - c.front().logit));
    for (auto& r : c) r.p /= sum;
  };
  c.erase(std::remove_if(c.begin(), c.end(), [](auto& r) { return r.logit == -kInf; }), c.end());
  renormalise();
  const double p_max = c.front().p;
  c.erase(std::remove_if(c.begin(), c.end(), [&](auto& r) { return r.p < o.min_p * p_max; }), c.end());
  renormalise();
  if (o.top_k > 0 && size_t(o.top_k) < c.size()) c.resize(size_t(o.top_k));
  renormalise();
  if (o.top_p < 1.0f) {
    double before = 0.0;
    size_t keep = 0;
    while (keep < c.size() && before < o.top_p) before += c[keep++].p;
    c.resize(keep);
    renormalise();
  }
  return c;
}

// The token the rule draws from the kept tokens, or nullopt when the draw lands within 1e-6 of a boundary or on a
// near-tie (where the float arithmetic of the sampler and the double arithmetic here may legitimately disagree).
std::optional<int32_t> reference_walk(const std::vector<Ranked>& kept, double u) {
  double acc = 0.0;
  for (size_t i = 0; i < kept.size(); ++i) {
    acc += kept[i].p;
    if (std::fabs(u - acc) < 1e-6) return std::nullopt;
    if (u < acc) {
      auto near = [&](size_t j) {  // distinct values that float scaling may make equal (exact ties rank by id in both)
        const double gap = std::fabs(kept[j].logit - kept[i].logit);
        return gap > 0 && gap < 1e-6 * (1 + std::fabs(kept[i].logit));
      };
      if ((i > 0 && near(i - 1)) || (i + 1 < kept.size() && near(i + 1))) return std::nullopt;
      return kept[i].id;
    }
  }
  return kept.back().id;
}

std::optional<int32_t> reference_token(const std::vector<double>& logits, const SamplingOptions& o,
                                       uint32_t sample_index) {
  if (o.temperature == 0.0f || o.top_k == 1) return reference_argmax(logits);
  return reference_walk(reference_kept(logits, o), draw_u(o, sample_index));
}

// Draws sample indices [0, draws) with Sampler and the reference; returns how many the reference left undecided.
int check_draws_against_reference(const std::vector<float>& logits, const SamplingOptions& o, uint32_t draws) {
  Sampler sampler;
  const std::vector<Ranked> kept = reference_kept(to_double(logits), o);
  int undecided = 0;
  for (uint32_t i = 0; i < draws; ++i) {
    const std::optional<int32_t> expected = reference_walk(kept, draw_u(o, i));
    const int32_t got = sampler.sample(logits.data(), int(logits.size()), o, i);
    if (!expected) {
      ++undecided;
      continue;
    }
    INFO("sample_index " << i << " temperature " << o.temperature << " top_p " << o.top_p << " top_k " << o.top_k
                         << " min_p " << o.min_p);
    REQUIRE(got == *expected);
  }
  CHECK(undecided <= int(draws / 20 + 2));  // long walks into a flat tail of 50k tokens meet the most boundaries
  return undecided;
}

// The previous implementation (full sort), kept here to check that seeded outputs did not change.
int32_t previous_sample(const float* logits, int vocab_size, const SamplingOptions& o, uint32_t sample_index) {
  if (o.temperature <= 0.0f || o.top_k == 1) return reference_argmax(std::vector<double>(logits, logits + vocab_size));
  std::vector<std::pair<float, int32_t>> candidates(static_cast<size_t>(vocab_size));
  for (int32_t i = 0; i < vocab_size; ++i) candidates[i] = {logits[i] / o.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates.size();
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < keep) {
    keep = static_cast<size_t>(o.top_k);
    std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), by_logit);
  } else {
    std::sort(candidates.begin(), candidates.end(), by_logit);
  }
  const float max_logit = candidates.front().first;
  double total = 0.0;
  std::vector<double> probs(keep);
  for (size_t i = 0; i < keep; ++i) total += (probs[i] = std::exp(double(candidates[i].first - max_logit)));
  if (o.top_p < 1.0f) {
    double cum = 0.0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cum += probs[i] / total;
      if (cum >= o.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  const double r = draw_u(o, sample_index) * total;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return candidates[i].second;
  }
  return candidates[keep - 1].second;
}

std::vector<double> reference_log_softmax(const std::vector<float>& logits) {
  double max = -kInf;
  for (float l : logits) max = std::max(max, double(l));
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l) - max);
  std::vector<double> out;
  for (float l : logits) out.push_back(double(l) - max - std::log(sum));
  return out;
}

// Repetition over prompt and output tokens, then frequency and presence over output counts, in double.
std::vector<double> reference_penalised(const std::vector<float>& raw, const SamplingOptions& o,
                                        const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  std::vector<double> l = to_double(raw);
  std::map<int32_t, int> counts;
  for (int32_t id : output) ++counts[id];
  std::vector<bool> seen(raw.size());
  for (int32_t id : prompt) seen[id] = true;
  for (int32_t id : output) seen[id] = true;
  for (size_t i = 0; i < l.size(); ++i)
    if (seen[i]) l[i] = l[i] > 0 ? l[i] / o.repetition_penalty : l[i] * o.repetition_penalty;
  for (auto [id, count] : counts) l[id] -= double(o.frequency_penalty) * count + double(o.presence_penalty);
  return l;
}

PenaltyHistory make_history(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  PenaltyHistory h;
  h.add_prompt(prompt);
  for (int32_t id : output) h.add_output(id);
  return h;
}

std::map<int32_t, int> histogram(const std::vector<float>& logits, const SamplingOptions& o, uint32_t draws) {
  Sampler sampler;
  std::map<int32_t, int> seen;
  for (uint32_t i = 0; i < draws; ++i) ++seen[sampler.sample(logits.data(), int(logits.size()), o, i)];
  return seen;
}

// The chi-square quantile of `df` degrees of freedom at the 0.1% upper tail (Wilson-Hilferty; within 3% of the
// exact value for df >= 1, and above it for df = 1).
double chi_square_0_001(int df) {
  const double z = 3.0902;  // the standard normal's 0.1% upper quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

// Draws sample indices [0, draws) with o's seed and compares the frequencies with the reference's kept tokens and
// renormalised probabilities (reference_kept: sorted in double, filtered in vLLM's order): no token outside them
// is drawn, the chi-square statistic over them is below its 0.1% quantile, and no frequency is off by more than
// `max_deviation`. Deterministic: the seed is fixed, so a sampler that passes once always does.
void check_frequencies(const std::vector<float>& logits, const SamplingOptions& o, uint32_t draws,
                       double max_deviation = 0.01) {
  const std::vector<Ranked> kept = reference_kept(to_double(logits), o);
  const std::map<int32_t, int> seen = histogram(logits, o, draws);
  INFO("temperature " << o.temperature << " top_k " << o.top_k << " top_p " << o.top_p << " min_p " << o.min_p
                      << ": " << kept.size() << " tokens kept");
  std::map<int32_t, double> expected;
  for (const Ranked& r : kept) expected[r.id] = r.p;
  for (auto [id, count] : seen) {
    INFO("token " << id << " drawn " << count << " times");
    CHECK(expected.count(id) == 1);
  }
  double chi2 = 0.0, worst = 0.0;
  for (auto [id, p] : expected) {
    const double count = seen.count(id) ? seen.at(id) : 0;
    const double e = p * draws;
    REQUIRE(e >= 5.0);  // the chi-square approximation needs it: pick logits and draws accordingly
    chi2 += (count - e) * (count - e) / e;
    worst = std::max(worst, std::fabs(count / draws - p));
  }
  const int df = int(expected.size()) - 1;
  INFO("chi-square " << chi2 << " with " << df << " degrees of freedom; largest frequency error " << worst);
  if (df > 0) CHECK(chi2 < chi_square_0_001(df));
  CHECK(worst < max_deviation);
}

}  // namespace

TEST_CASE("sampler: greedy picks the highest logit, lowest id on ties - top_k 1 is greedy", "[sampler]") {
  Sampler s;
  const std::vector<float> logits{1.0f, 3.0f, 3.0f, -1.0f};
  CHECK(s.sample(logits.data(), 4, options(0.0f), 0) == 1);
  CHECK(s.sample(logits.data(), 4, options(1.0f, 1.0f, 1, 5), 0) == 1);
  const std::vector<float> big = random_logits(150000, 3.0f, 11);
  CHECK(s.sample(big.data(), int(big.size()), options(0.0f), 0) == reference_argmax(to_double(big)));
  const std::vector<float> all_masked(37, -std::numeric_limits<float>::infinity());
  CHECK(s.sample(all_masked.data(), 37, options(0.0f), 0) == 0);
  CHECK(s.sample(all_masked.data(), 37, options(1.0f), 0) == 0);
}

TEST_CASE("sampler: temperature draws match the reference token by token", "[sampler]") {
  for (float temperature : {0.3f, 0.8f, 1.0f, 1.7f}) {
    check_draws_against_reference(random_logits(1000, 3.0f, 1), options(temperature, 1.0f, 0, 42), 2000);
    check_draws_against_reference(random_logits(1003, 1.0f, 2), options(temperature, 1.0f, 0, 7), 1000);
  }
  // Large vocabulary: the head gathered from the total's bound, on a flat and on a peaked distribution.
  check_draws_against_reference(random_logits(50000, 3.0f, 3), options(0.8f, 1.0f, 0, 1), 300);
  std::vector<float> peaked = random_logits(50000, 1.0f, 4);
  for (int i = 0; i < 20; ++i) peaked[size_t(i) * 997] += 12.0f;
  check_draws_against_reference(peaked, options(1.0f, 1.0f, 0, 2), 300);
}

TEST_CASE("sampler: temperature draw frequencies follow the softmax", "[sampler]") {
  const std::vector<float> logits{0.5f, 1.5f, -0.2f, 1.0f, 0.0f, 2.0f, -1.0f, 0.7f};
  const SamplingOptions o = options(0.9f, 1.0f, 0, 3);
  const uint32_t draws = 40000;
  const std::map<int32_t, int> seen = histogram(logits, o, draws);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l / 0.9);
  for (int32_t i = 0; i < 8; ++i) {
    const double expected = std::exp(logits[i] / 0.9) / sum;
    const double got = seen.count(i) ? double(seen.at(i)) / draws : 0.0;
    INFO("token " << i);
    CHECK(std::fabs(got - expected) < 0.01);
  }
}

TEST_CASE("sampler: different seeds give different draws - the same seed the same ones", "[sampler]") {
  // Eight tokens, none below 2%: argmax, or a draw that ignores the seed, fails this.
  const std::vector<float> logits{0.5f, 1.5f, -0.2f, 1.0f, 0.0f, 2.0f, -1.0f, 0.7f};
  Sampler s;
  auto draws_of = [&](uint64_t seed) {
    std::vector<int32_t> d;
    for (uint32_t i = 0; i < 32; ++i) d.push_back(s.sample(logits.data(), 8, options(1.0f, 1.0f, 0, seed), i));
    return d;
  };
  std::set<std::vector<int32_t>> sequences;
  std::set<int32_t> first_draws;
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    const std::vector<int32_t> d = draws_of(seed);
    CHECK(draws_of(seed) == d);
    sequences.insert(d);
    first_draws.insert(d[0]);
  }
  CHECK(sequences.size() == 64);    // 32 draws: two seeds agreeing on all of them is beyond chance
  CHECK(first_draws.size() >= 6);   // the first draw alone, over 64 seeds, takes most of the 8 values
  // Truncation keeps the seed's effect within the kept tokens.
  std::set<int32_t> kept_draws;
  for (uint64_t seed = 1; seed <= 64; ++seed) kept_draws.insert(s.sample(logits.data(), 8, options(1.0f, 1.0f, 3, seed), 0));
  CHECK(kept_draws == std::set<int32_t>{1, 3, 5});
}

TEST_CASE("sampler: draw frequencies follow the softmax at each temperature - chi-square", "[sampler]") {
  // Twelve logits whose smallest probability still gives >= 5 expected draws at each temperature.
  const std::vector<float> logits{2.0f, 1.6f, 1.3f, 1.0f, 0.8f, 0.5f, 0.2f, 0.0f, -0.3f, -0.6f, -1.0f, -1.5f};
  for (float temperature : {0.5f, 1.0f, 1.5f}) check_frequencies(logits, options(temperature, 1.0f, 0, 17), 40000);
  // A temperature below 1 sharpens the distribution: the best token is drawn more often than at 1.
  const auto sharp = histogram(logits, options(0.5f, 1.0f, 0, 17), 10000);
  const auto plain = histogram(logits, options(1.0f, 1.0f, 0, 17), 10000);
  CHECK(sharp.at(0) > plain.at(0) + 1000);
}

TEST_CASE("sampler: top-k - top-p - min-p draw from the truncated renormalised softmax - chi-square", "[sampler]") {
  const std::vector<float> logits{2.0f, 1.6f, 1.3f, 1.0f, 0.8f, 0.5f, 0.2f, 0.0f, -0.3f, -0.6f, -1.0f, -1.5f};
  check_frequencies(logits, options(1.0f, 1.0f, 4, 23), 40000);               // top-k: 4 tokens
  check_frequencies(logits, options(0.9f, 0.8f, 0, 29), 40000);               // top-p
  check_frequencies(logits, options(1.0f, 1.0f, 0, 31, 0.2f), 40000);         // min-p
  check_frequencies(logits, options(1.3f, 0.9f, 6, 37, 0.05f), 40000);        // all three, in vLLM's order
  // A larger row: top-k 40 of 1000 at temperature 0.8 (more draws: 40 cells).
  const std::vector<float> wide = random_logits(1000, 0.3f, 41);
  check_frequencies(wide, options(0.8f, 1.0f, 40, 43), 100000, 0.005);
}

TEST_CASE("sampler: top-k keeps the k best, lower id first on ties", "[sampler]") {
  const std::vector<float> logits = random_logits(1000, 3.0f, 5);
  for (int32_t k : {2, 5, 50, 200, 600, 999})
    check_draws_against_reference(logits, options(0.8f, 1.0f, k, 9), 1000);
  check_draws_against_reference(random_logits(50000, 3.0f, 6), options(1.0f, 1.0f, 40, 9), 300);
  // Three tokens tie for the best; k = 2 keeps the two lower ids.
  const std::vector<float> tied{1.0f, 3.0f, 3.0f, 3.0f, 0.0f};
  const std::map<int32_t, int> seen = histogram(tied, options(1.0f, 1.0f, 2, 1), 500);
  CHECK(seen.size() == 2);
  CHECK(seen.count(1) == 1);
  CHECK(seen.count(2) == 1);
}

TEST_CASE("sampler: logits with many exact ties (bf16-like) draw as the reference", "[sampler]") {
  std::vector<float> logits = random_logits(20000, 3.0f, 19);
  for (float& l : logits) l = std::round(l * 4.0f) / 4.0f;
  check_draws_against_reference(logits, options(0.7f, 1.0f, 50, 5), 500);
  check_draws_against_reference(logits, options(0.7f, 0.9f, 0, 5), 300);
  check_draws_against_reference(logits, options(1.3f, 0.8f, 200, 5, 0.01f), 500);
}

TEST_CASE("sampler: top-k ranks logits / temperature in float: logits it makes equal rank by id", "[sampler]") {
  // Two adjacent floats that divide to the same float: the higher raw logit has the higher id, so it ranks second.
  const float t = 1.8f;
  float x = 1.9f;
  while (std::nextafter(x, 2.0f) / t != x / t) x = std::nextafter(x, 2.0f);
  const std::vector<float> logits{x, std::nextafter(x, 2.0f), x + 0.3f, x - 2.0f, x - 3.0f};
  const std::map<int32_t, int> seen = histogram(logits, options(t, 1.0f, 2, 4), 400);
  CHECK(seen.size() == 2);
  CHECK(seen.count(0) == 1);
  CHECK(seen.count(2) == 1);
}

TEST_CASE("sampler: top-p keeps a token while the mass before it is below p", "[sampler]") {
  // Four equal tokens: 0.25 each, so the cumulative mass hits p exactly at the boundary.
  const std::vector<float> flat(4, 0.0f);
  auto kept = [&](float top_p) {
    std::vector<int32_t> ids;
    for (auto [id, count] : histogram(flat, options(1.0f, top_p, 0, 5), 400)) ids.push_back(id);
    return ids;
  };
  CHECK(kept(0.25f) == std::vector<int32_t>{0});
  CHECK(kept(0.5f) == std::vector<int32_t>{0, 1});
  CHECK(kept(0.50001f) == std::vector<int32_t>{0, 1, 2});
  CHECK(kept(0.75f) == std::vector<int32_t>{0, 1, 2});
  CHECK(kept(0.9f) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(kept(0.01f) == std::vector<int32_t>{0});
  const std::vector<float> logits = random_logits(1000, 3.0f, 7);
  for (float p : {0.1f, 0.5f, 0.9f, 0.95f, 0.999f}) check_draws_against_reference(logits, options(0.8f, p, 0, 4), 1000);
  check_draws_against_reference(random_logits(50000, 3.0f, 8), options(0.8f, 0.9f, 0, 4), 300);
  check_draws_against_reference(random_logits(1000, 3.0f, 9), options(1.2f, 0.9f, 50, 4), 1000);
}

TEST_CASE("sampler: min-p drops tokens below min_p x the best probability", "[sampler]") {
  const std::vector<float> logits = random_logits(1000, 2.0f, 10);
  // min_p 0 drops nothing: the draws of a sampler without min-p (the previous one).
  Sampler s;
  for (uint32_t i = 0; i < 300; ++i)
    CHECK(s.sample(logits.data(), 1000, options(0.8f, 0.9f, 0, 6, 0.0f), i) ==
          previous_sample(logits.data(), 1000, options(0.8f, 0.9f, 0, 6), i));
  for (float min_p : {0.001f, 0.05f, 0.3f})
    check_draws_against_reference(logits, options(0.8f, 1.0f, 0, 6, min_p), 1000);
  check_draws_against_reference(logits, options(0.8f, 0.9f, 20, 6, 0.05f), 1000);
  check_draws_against_reference(random_logits(50000, 3.0f, 12), options(1.0f, 1.0f, 0, 6, 0.01f), 300);
  // min_p 1 keeps only the maxima, both tied ones.
  const std::vector<float> tied{2.0f, 5.0f, 5.0f, 1.0f, 4.9f};
  const std::map<int32_t, int> seen = histogram(tied, options(1.0f, 1.0f, 0, 2, 1.0f), 400);
  CHECK(seen.size() == 2);
  CHECK(seen.count(1) == 1);
  CHECK(seen.count(2) == 1);
}

TEST_CASE("sampler: seeded draws equal the previous implementation's", "[sampler]") {
  const std::vector<float> small = random_logits(2000, 3.0f, 13);
  const std::vector<float> large = random_logits(50000, 2.0f, 14);
  Sampler s;
  for (float t : {0.7f, 1.0f, 1.3f})
    for (int32_t k : {0, 40, 600})
      for (float p : {1.0f, 0.9f, 0.5f}) {
        const SamplingOptions o = options(t, p, k, 1234);
        for (uint32_t i = 0; i < 200; ++i) {
          INFO("t " << t << " k " << k << " p " << p << " i " << i);
          REQUIRE(s.sample(small.data(), 2000, o, i) == previous_sample(small.data(), 2000, o, i));
        }
        for (uint32_t i = 0; i < 4; ++i)
          REQUIRE(s.sample(large.data(), 50000, o, i) == previous_sample(large.data(), 50000, o, i));
      }
}

TEST_CASE("sampler: repetition penalty divides positive and multiplies negative logits", "[sampler]") {
  const std::vector<float> raw{2.0f, 1.9f, -1.0f, 0.5f, -3.0f, 1.0f};
  const std::vector<int32_t> prompt{0, 2, 2};
  const std::vector<int32_t> output{4, 0};
  SamplingOptions o = options(0.0f);
  o.repetition_penalty = 1.25f;
  const PenaltyHistory history = make_history(prompt, output);
  std::vector<float> row = raw;
  Sampler s;
  const SampledToken t = s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, &history, {}});
  const std::vector<double> expected = reference_penalised(raw, o, prompt, output);
  for (size_t i = 0; i < raw.size(); ++i) CHECK(row[i] == Approx(expected[i]).epsilon(1e-6));
  CHECK(row[0] == Approx(1.6));
  CHECK(row[2] == Approx(-1.25));
  CHECK(t.token == 1);  // greedy after the penalty: 2.0 / 1.25 < 1.9
  // Penalties below 1 favour the seen tokens.
  o.repetition_penalty = 0.5f;
  row = raw;
  CHECK(s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, &history, {}}).token == 0);
  CHECK(row[4] == -1.5f);
  // No history: no penalty.
  row = raw;
  CHECK(s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, nullptr, {}}).token == 0);
  CHECK(row == raw);
}

TEST_CASE("sampler: logit biases are added to the raw logits before the penalties - logprobs stay raw", "[sampler]") {
  const std::vector<float> raw{2.0f, 1.9f, -1.0f, 0.5f, -3.0f, 1.0f};
  Sampler s;
  SamplingOptions o = options(0.0f);
  o.logit_bias = {{0, -100.0f}, {4, 5.5f}, {9, 3.0f} /* outside the row: ignored */};
  std::vector<float> row = raw;
  CHECK(s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, nullptr, {}}).token == 4);
  CHECK(row[0] == 2.0f - 100.0f);
  CHECK(row[4] == -3.0f + 5.5f);
  CHECK(row[1] == raw[1]);
  // -100 keeps the raw best away, and no other bias: the second best.
  o.logit_bias = {{0, -100.0f}};
  row = raw;
  CHECK(s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, nullptr, {}}).token == 1);
  // Before the repetition penalty (vLLM's order): token 4 biased to 2.5, then divided by 1.25, is 2.0 and beats
  // token 1's 1.9 (token 0, seen too, drops to 1.6). Biased after the penalty it would be -3.75 + 5.5 = 1.75.
  o.logit_bias = {{4, 5.5f}};
  o.repetition_penalty = 1.25f;
  const PenaltyHistory history = make_history({0, 4}, {});
  row = raw;
  CHECK(s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, &history, {}}).token == 4);
  CHECK(row[4] == (-3.0f + 5.5f) / 1.25f);
  CHECK(row[0] == 2.0f / 1.25f);
  // Logprobs are of the raw row, the sampled token's included.
  const std::vector<double> expected = reference_log_softmax(raw);
  o = options(0.0f);
  o.logprobs = 3;
  o.logit_bias = {{4, 100.0f}};
  row = raw;
  const SampledToken t = s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, nullptr, {}});
  CHECK(t.token == 4);
  CHECK(t.logprob == Approx(expected[4]).margin(1e-6));
  REQUIRE(t.top.size() == 3);
  CHECK(t.top[0].first == 0);
  CHECK(t.top[0].second == Approx(expected[0]).margin(1e-6));
  // A seeded draw sees the biased row: a token biased by +100 is (all but) certain.
  o = options(1.0f);
  o.logit_bias = {{2, 100.0f}};
  for (uint32_t i = 0; i < 20; ++i) {
    row = raw;
    o.seed = i;
    CHECK(s.sample(row.data(), int(row.size()), SampleRequest{&o, i, nullptr, {}}).token == 2);
  }
}

TEST_CASE("sampler: a response format's allowed ids - the others never sampled, before the biases - logprobs raw",
          "[sampler]") {
  const std::vector<float> raw = random_logits(300, 3.0f, 21);
  std::vector<uint64_t> bits((300 + 63) / 64, 0);
  const std::vector<int32_t> allowed_ids{3, 64, 65, 170, 299};
  for (int32_t id : allowed_ids) bits[size_t(id) / 64] |= uint64_t{1} << (id % 64);
  Sampler s;
  SamplingOptions o = options(0.0f);
  o.logprobs = 2;
  o.logit_bias = {{4, 100.0f}, {170, 5.0f}};  // 4 is not allowed: its bias cannot bring it back
  std::vector<float> row = raw;
  const SampledToken greedy = s.sample(row.data(), 300, SampleRequest{&o, 0, nullptr, {}, bits});
  CHECK(greedy.token == 170);
  for (int32_t id = 0; id < 300; ++id) {
    const bool ok = std::find(allowed_ids.begin(), allowed_ids.end(), id) != allowed_ids.end();
    if (!ok) CHECK(std::isinf(row[size_t(id)]));
  }
  const std::vector<double> expected = reference_log_softmax(raw);
  CHECK(greedy.logprob == Approx(expected[170]).margin(1e-6));  // of the raw row
  o = options(1.5f);
  o.logit_bias.clear();
  for (uint32_t i = 0; i < 200; ++i) {
    o.seed = i;
    row = raw;
    const int32_t t = s.sample(row.data(), 300, SampleRequest{&o, i, nullptr, {}, bits}).token;
    CHECK(std::find(allowed_ids.begin(), allowed_ids.end(), t) != allowed_ids.end());
  }
  SamplingOptions json_mode = options(0.0f);
  json_mode.response_format = ResponseFormat::json_object;
  CHECK_FALSE(takes_raw_argmax(json_mode, false));
  DeviceSamplingPlan plan;
  const SampleRequest requests[] = {SampleRequest{&json_mode, 0, nullptr, {}, bits}, SampleRequest{&json_mode, 0, nullptr, {}, {}}};
  plan_device_sampling(requests, 300, plan);
  CHECK(plan.params[0].host == 1);  // rows with allowed ids are drawn on the host
  CHECK(plan.params[1].host == 0);
}

TEST_CASE("sampler: frequency and presence penalties count generated tokens only", "[sampler]") {
  const std::vector<float> raw = random_logits(64, 2.0f, 15);
  const std::vector<int32_t> prompt{1, 2, 3, 7};
  const std::vector<int32_t> output{3, 3, 3, 5, 9, 9, 3};
  SamplingOptions o = options(0.0f);
  o.frequency_penalty = 0.7f;
  o.presence_penalty = -0.4f;
  o.repetition_penalty = 1.1f;
  const PenaltyHistory history = make_history(prompt, output);
  std::vector<float> row = raw;
  Sampler s;
  const SampledToken t = s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, &history, {}});
  const std::vector<double> expected = reference_penalised(raw, o, prompt, output);
  for (size_t i = 0; i < raw.size(); ++i) CHECK(row[i] == Approx(expected[i]).margin(1e-5));
  CHECK(t.token == reference_argmax(expected));
  // Token 3, generated 4 times, against its raw logit without repetition penalty.
  o.repetition_penalty = 1.0f;
  row = raw;
  s.sample(row.data(), int(row.size()), SampleRequest{&o, 0, &history, {}});
  CHECK(row[3] == Approx(raw[3] - 0.7 * 4 + 0.4).margin(1e-5));
  CHECK(row[1] == raw[1]);  // prompt only
  // A large negative frequency penalty makes greedy pick the repeated token; sampling draws follow the reference.
  o.frequency_penalty = -2.0f;
  o.presence_penalty = 2.0f;
  std::vector<float> flat(64, 0.0f);
  row = flat;
  CHECK(s.sample(row.data(), 64, SampleRequest{&o, 0, &history, {}}).token == 3);
  o.temperature = 0.9f;
  o.seed = 77;
  o.repetition_penalty = 1.3f;
  const std::vector<double> penalised = reference_penalised(raw, o, prompt, output);
  for (uint32_t i = 0; i < 300; ++i) {
    row = raw;
    const std::optional<int32_t> expected_token = reference_token(penalised, o, i);
    const int32_t got = s.sample(row.data(), 64, SampleRequest{&o, i, &history, {}}).token;
    if (expected_token) CHECK(got == *expected_token);
  }
}

TEST_CASE("sampler: masked ids are never sampled - ids outside the vocabulary are ignored", "[sampler]") {
  const std::vector<float> raw{1.0f, 4.0f, 3.5f, 0.0f, 3.9f};
  SamplingOptions o = options(0.0f);
  Sampler s;
  const std::vector<int32_t> masked{1, -3, 99};
  std::vector<float> row = raw;
  CHECK(s.sample(row.data(), 5, SampleRequest{&o, 0, nullptr, masked}).token == 4);
  CHECK(std::isinf(row[1]));
  o = options(1.5f, 1.0f, 0, 8);
  const std::vector<int32_t> two{1, 4};
  std::map<int32_t, int> seen;
  for (uint32_t i = 0; i < 500; ++i) {
    row = raw;
    ++seen[s.sample(row.data(), 5, SampleRequest{&o, i, nullptr, two}).token];
  }
  CHECK(seen.count(1) == 0);
  CHECK(seen.count(4) == 0);
  CHECK(seen.size() == 3);
  const std::vector<int32_t> all_but_three{0, 1, 2, 4};
  for (uint32_t i = 0; i < 50; ++i) {
    row = raw;
    CHECK(s.sample(row.data(), 5, SampleRequest{&o, i, nullptr, all_but_three}).token == 3);
  }
}

TEST_CASE("sampler: logprobs are the raw log-softmax, top-N best first, ties lower id first", "[sampler]") {
  const std::vector<float> raw = random_logits(5000, 3.0f, 16);
  const std::vector<double> expected = reference_log_softmax(raw);
  std::vector<int32_t> order(raw.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });
  Sampler s;
  for (int32_t n : {0, 1, 5, 20}) {
    SamplingOptions o = options(0.8f, 0.9f, 0, 3);
    o.logprobs = n;
    std::vector<float> row = raw;
    const SampledToken t = s.sample(row.data(), int(row.size()), SampleRequest{&o, 4, nullptr, {}});
    CHECK(t.logprob == Approx(expected[t.token]).margin(1e-5));
    REQUIRE(t.top.size() == size_t(n));
    for (int32_t j = 0; j < n; ++j) {
      CHECK(t.top[j].first == order[j]);
      CHECK(t.top[j].second == Approx(expected[order[j]]).margin(1e-5));
    }
  }
  // Ties: lower id first.
  const std::vector<float> tied{0.0f, 2.0f, 1.0f, 2.0f, 2.0f, 1.0f};
  SamplingOptions o = options(0.0f);
  o.logprobs = 4;
  std::vector<float> row = tied;
  const SampledToken t = s.sample(row.data(), 6, SampleRequest{&o, 0, nullptr, {}});
  REQUIRE(t.top.size() == 4);
  CHECK(t.top[0].first == 1);
  CHECK(t.top[1].first == 3);
  CHECK(t.top[2].first == 4);
  CHECK(t.top[3].first == 2);
  CHECK(t.token == 1);
}

TEST_CASE("sampler: logprobs ignore penalties, masks and temperature", "[sampler]") {
  const std::vector<float> raw = random_logits(3000, 3.0f, 17);
  const std::vector<double> expected = reference_log_softmax(raw);
  SamplingOptions plain = options(1.0f);
  plain.logprobs = 20;
  Sampler s;
  std::vector<float> row = raw;
  const SampledToken reference = s.sample(row.data(), 3000, SampleRequest{&plain, 0, nullptr, {}});
  // Make token 17 win greedily through a negative frequency penalty, and mask the raw best.
  const int32_t raw_best = reference_argmax(to_double(raw));
  const std::vector<int32_t> output(40, 17);
  const PenaltyHistory history = make_history({raw_best, 5}, output);
  SamplingOptions o = options(0.0f);
  o.logprobs = 20;
  o.frequency_penalty = -2.0f;
  o.repetition_penalty = 1.5f;
  o.presence_penalty = 1.0f;
  const std::vector<int32_t> masked{raw_best, 17 + 1};
  row = raw;
  const SampledToken t = s.sample(row.data(), 3000, SampleRequest{&o, 0, &history, masked});
  CHECK(t.token == 17);
  CHECK(t.logprob == Approx(expected[17]).margin(1e-5));
  CHECK(t.top == reference.top);
  o.temperature = 0.5f;
  o.seed = 3;
  row = raw;
  const SampledToken drawn = s.sample(row.data(), 3000, SampleRequest{&o, 9, &history, masked});
  CHECK(drawn.top == reference.top);
  CHECK(drawn.logprob == Approx(expected[drawn.token]).margin(1e-5));
}

TEST_CASE("sampler: the const overload leaves logits untouched and agrees with the request overload", "[sampler]") {
  const std::vector<float> raw = random_logits(4000, 3.0f, 18);
  std::vector<float> copy = raw;
  Sampler s;
  for (uint32_t i = 0; i < 100; ++i) {
    const SamplingOptions o = options(0.7f, 0.95f, 0, 21, 0.01f);
    const int32_t token = s.sample(static_cast<const float*>(copy.data()), 4000, o, i);
    std::vector<float> row = raw;
    CHECK(s.sample(row.data(), 4000, SampleRequest{&o, i, nullptr, {}}).token == token);
  }
  CHECK(copy == raw);
  // A temperature so small that logits / temperature overflow acts as greedy.
  CHECK(s.sample(raw.data(), 4000, options(1e-38f, 1.0f, 0, 1), 0) == reference_argmax(to_double(raw)));
}

TEST_CASE("sampler: BatchSampler equals single Sampler results, whatever the batch and the pool", "[sampler]") {
  const int vocab = 20000;
  std::vector<SamplingOptions> opts(8);
  opts[0] = options(0.0f);
  opts[1] = options(0.8f, 1.0f, 0, 1);
  opts[2] = options(0.8f, 0.95f, 50, 2);
  opts[3] = options(0.8f, 0.9f, 0, 3);
  opts[4] = options(1.0f, 1.0f, 0, 4, 0.05f);
  opts[5] = options(0.7f, 1.0f, 0, 5);
  opts[5].repetition_penalty = 1.2f;
  opts[5].frequency_penalty = 0.5f;
  opts[5].presence_penalty = 0.3f;
  opts[6] = options(0.9f, 1.0f, 0, 6);
  opts[6].logprobs = 20;
  opts[7] = options(0.0f);
  opts[7].logprobs = 0;
  const PenaltyHistory history = make_history({1, 2, 3, 4, 5}, {7, 7, 8, 100});
  const std::vector<int32_t> masked{9, 10, 11};
  const int rows = 21;
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row = random_logits(vocab, 3.0f, 100 + uint32_t(r));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<SampleRequest> requests;
  for (int r = 0; r < rows; ++r)
    requests.push_back(SampleRequest{&opts[size_t(r) % opts.size()], uint32_t(r * 3), r % 3 == 0 ? &history : nullptr,
                                     r % 4 == 0 ? std::span<const int32_t>(masked) : std::span<const int32_t>()});
  std::vector<SampledToken> single(rows);
  Sampler s;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + size_t(r) * vocab, logits.begin() + size_t(r + 1) * vocab);
    single[r] = s.sample(row.data(), vocab, requests[r]);
  }
  for (int threads : {1, 2}) {
    cpu::ThreadPool pool(threads);
    BatchSampler batch;
    for (int repeat = 0; repeat < 2; ++repeat) {
      std::vector<float> work = logits;
      std::vector<SampledToken> out(rows);
      batch.sample_rows(work.data(), vocab, requests, out, pool);
      for (int r = 0; r < rows; ++r) {
        INFO("threads " << threads << " row " << r);
        CHECK(out[r].token == single[r].token);
        CHECK(out[r].logprob == single[r].logprob);
        CHECK(out[r].top == single[r].top);
      }
    }
    // The same row and (seed, sample_index), alone or in a smaller batch: the same token.
    std::vector<float> one(logits.begin() + 2 * size_t(vocab), logits.begin() + 3 * size_t(vocab));
    std::vector<SampledToken> out(1);
    batch.sample_rows(one.data(), vocab, std::span<const SampleRequest>(&requests[2], 1), out, pool);
    CHECK(out[0].token == single[2].token);
    std::vector<float> tail(logits.begin() + 2 * size_t(vocab), logits.begin() + 7 * size_t(vocab));
    std::vector<SampledToken> out5(5);
    batch.sample_rows(tail.data(), vocab, std::span<const SampleRequest>(&requests[2], 5), out5, pool);
    for (int r = 0; r < 5; ++r) CHECK(out5[r].token == single[2 + r].token);
  }
}

TEST_CASE("PenaltyHistory: prompt tokens are seen, outputs are seen and counted, clear forgets", "[sampler]") {
  PenaltyHistory h;
  const std::vector<int32_t> prompt{5, 3, 5, 8};
  h.add_prompt(prompt);
  CHECK(h.seen() == std::vector<int32_t>{5, 3, 8});
  CHECK(h.output_counts().empty());
  h.add_output(3);
  h.add_output(9);
  h.add_output(3);
  CHECK(h.seen() == std::vector<int32_t>{5, 3, 8, 9});
  CHECK(h.output_counts().size() == 2);
  CHECK(h.output_counts().at(3) == 2);
  CHECK(h.output_counts().at(9) == 1);
  h.clear();
  CHECK(h.seen().empty());
  CHECK(h.output_counts().empty());
  h.add_output(4);
  CHECK(h.seen() == std::vector<int32_t>{4});
  CHECK(h.output_counts().at(4) == 1);
}

TEST_CASE("SamplingOptions::validate refuses bad values and names the field", "[sampler]") {
  CHECK(SamplingOptions{}.validate(1000).ok());
  auto refused = [](SamplingOptions o, const std::string& field, int vocab = 0) {
    const Status s = o.validate(vocab);
    INFO(field);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code == Errc::invalid_argument);
    CHECK(s.error().message.find(field + ":") == 0);
  };
  SamplingOptions o;
  o.top_p = 0.0f;
  refused(o, "top_p");
  o.top_p = 1.5f;
  refused(o, "top_p");
  o = {};
  o.temperature = -1.0f;
  refused(o, "temperature");
  o.temperature = std::nanf("");
  refused(o, "temperature");
  o = {};
  o.top_k = 1001;
  refused(o, "top_k", 1000);
  CHECK(o.validate(0).ok());
  o = {};
  o.logprobs = 21;
  refused(o, "logprobs");
  o.logprobs = 20;
  CHECK(o.validate().ok());
  o = {};
  o.min_p = 2.0f;
  refused(o, "min_p");
  o = {};
  o.logit_bias = {{3, 100.0f}, {7, -100.0f}};
  CHECK(o.validate(1000).ok());
  o.logit_bias = {{3, 100.5f}};
  refused(o, "logit_bias");
  o.logit_bias = {{3, std::nanf("")}};
  refused(o, "logit_bias");
  o.logit_bias = {{-1, 1.0f}};
  refused(o, "logit_bias");
  o.logit_bias = {{1000, 1.0f}};
  refused(o, "logit_bias", 1000);
  CHECK(o.validate(0).ok());  // no vocabulary known: any non-negative id
  o.logit_bias = {{7, 1.0f}, {3, 1.0f}};
  refused(o, "logit_bias");  // out of order
  o.logit_bias = {{3, 1.0f}, {3, 2.0f}};
  refused(o, "logit_bias");  // twice
}

TEST_CASE("sampler: greedy from vocabulary shards - each shard's best merged gives the whole row's greedy token",
          "[sampler]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Sampler sampler;
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  // Rows: a unique best in shard 1; a tie across shards (the lower id wins); a tie inside a shard; a shard of NaN
  // only; every logit -inf; random rows of 3 uneven shards.
  std::vector<std::vector<float>> rows = {
      {0.1f, 0.2f, 0.3f, 0.9f, 0.4f, 0.0f, -1.0f},
      {0.5f, 0.7f, 0.1f, 0.7f, 0.7f, 0.2f, 0.0f},
      {0.0f, 0.0f, 0.0f, 0.2f, 0.3f, 0.3f, 0.1f},
      {nan, nan, nan, -5.0f, -4.0f, -6.0f, nan},
      {-inf, -inf, -inf, -inf, -inf, -inf, -inf},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int r = 0; r < 20; ++r) {
    std::vector<float> row(7);
    for (float& v : row) v = std::round(u(rng) * 4) / 4;  // coarse values: ties happen
    rows.push_back(row);
  }
  const std::vector<std::pair<int, int>> shards = {{0, 3}, {3, 2}, {5, 2}};  // (first id, count)
  const int n = static_cast<int>(rows.size());
  std::vector<RowBest> bests(shards.size() * size_t(n));
  for (size_t s = 0; s < shards.size(); ++s)
    for (int r = 0; r < n; ++r)
      bests[s * size_t(n) + size_t(r)] = row_best(rows[size_t(r)].data() + shards[s].first, shards[s].second, shards[s].first);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  merge_row_bests(bests, static_cast<int>(shards.size()), n, tokens);
  for (int r = 0; r < n; ++r) {
    INFO("row " << r);
    CHECK(tokens[size_t(r)] == sampler.sample(rows[size_t(r)].data(), 7, greedy, 0));
  }
  CHECK(tokens[0] == 3);
  CHECK(tokens[1] == 1);
  CHECK(tokens[2] == 4);
  CHECK(tokens[3] == 4);
  CHECK(tokens[4] == 0);
}

TEST_CASE("sampler: which options make a row the argmax of its raw logits", "[sampler]") {
  SamplingOptions o;
  CHECK_FALSE(takes_raw_argmax(o, false));  // temperature 1
  o.temperature = 0.0f;
  CHECK(takes_raw_argmax(o, false));
  CHECK_FALSE(takes_raw_argmax(o, true));  // stop ids masked before min_tokens
  o.repetition_penalty = 1.1f;
  CHECK_FALSE(takes_raw_argmax(o, false));
  o.repetition_penalty = 1.0f;
  o.logprobs = 0;
  CHECK_FALSE(takes_raw_argmax(o, false));
  SamplingOptions k1;
  k1.top_k = 1;  // a draw from one candidate
  CHECK(takes_raw_argmax(k1, false));
  k1.logit_bias = {{3, 1.0f}};  // the biased row's argmax, not the raw one's
  CHECK_FALSE(takes_raw_argmax(k1, false));
}
