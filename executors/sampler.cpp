#include "executors/sampler.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "executors/cpu/thread_pool.hpp"

namespace actord {

void PenaltyHistory::mark_seen(int32_t id) {
  if (seen_set_.emplace(id, true).second) seen_.push_back(id);
}

void PenaltyHistory::add_prompt(std::span<const int32_t> ids) {
  for (const int32_t id : ids) mark_seen(id);
}

void PenaltyHistory::add_output(int32_t id) {
  mark_seen(id);
  ++output_counts_[id];
}

void PenaltyHistory::clear() {
  seen_.clear();
  seen_set_.clear();
  output_counts_.clear();
}

namespace {

using Candidate = std::pair<float, int32_t>;  // (logit / temperature, token id)
using SavedLogits = std::vector<std::pair<int32_t, float>>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kSortWhole = 1024;  // a top-k list this short is sorted whole, so its total sums in rank order

// The draw's order: higher logit first, lower id first on ties. A function object, so the sorts inline it.
struct RanksBefore {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
};
constexpr RanksBefore ranks_before;

// ---- Vector passes over a row, with GCC vector types. Maxima and selections use 4 floats (SSE2: every x86-64). The
// weight sum, the costly pass, runs 4 doubles wide where the CPU has AVX2 (checked at run time), else 2 wide; both
// add element i to lane i % 8 and sum the 8 lanes in order with the same operations, so a binary gives the same
// totals on every CPU (a build with FMA enabled throughout may differ from one without in the last bit).
typedef float FloatV __attribute__((vector_size(16)));
typedef int32_t Int32V __attribute__((vector_size(16)));  // a FloatV comparison's result
constexpr int kLanes = 4;
constexpr int kBlock = 16;  // floats that the selections skip at once when their maximum cannot enter

inline FloatV load(const float* p) {
  FloatV v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline FloatV max_lanes(FloatV a, FloatV b) { return a > b ? a : b; }  // a NaN in a is never taken
inline unsigned lane_bits(Int32V m) { return unsigned(_mm_movemask_ps((__m128)m)); }  // bit j: lane j is set

// Lane-wise maximum of the kBlock floats at p (NaN ignored).
inline FloatV block_max(const float* p) {
  FloatV m = FloatV{} - kInf;
  for (int j = 0; j < kBlock; j += kLanes) m = max_lanes(load(p + j), m);
  return m;
}

float max_of_lanes(FloatV v) { return std::max(std::max(v[0], v[1]), std::max(v[2], v[3])); }

// The largest of row[0, n), NaN ignored; -inf when there is none.
float max_of(const float* row, int n) {
  FloatV m = FloatV{} - kInf;
  int i = 0;
  for (; i + kBlock <= n; i += kBlock) m = max_lanes(block_max(row + i), m);
  float best = max_of_lanes(m);
  for (; i < n; ++i) best = row[i] > best ? row[i] : best;
  return best;
}

constexpr std::array<double, 14> kInverseFactorials = [] {
  std::array<double, 14> c{};
  double factorial = 1.0;  // exact up to 18!
  for (int j = 0; j < 14; ++j) c[j] = 1.0 / (factorial *= (j > 0 ? j : 1));
  return c;
}();

template <int Bytes>  // 16: SSE2, 32: AVX2
struct Wide {
  typedef double DoubleV __attribute__((vector_size(Bytes)));
  typedef int64_t Int64V __attribute__((vector_size(Bytes)));
  typedef float FloatV __attribute__((vector_size(Bytes)));
  typedef float HalfFloatV __attribute__((vector_size(Bytes / 2)));  // as many floats as DoubleV holds
};

// x = e^x in each lane for x <= 0, within an ulp of std::exp: x = n ln2 + r, |r| <= ln2 / 2, a degree-13 Taylor
// polynomial for e^r (truncation below 1e-17; Estrin's scheme, for a short dependency chain), times 2^n built in the
// exponent bits. 0 below -708 (where e^x would be subnormal, invisible next to the max's weight 1) and for -inf.
template <int Bytes>
[[gnu::always_inline]] inline void exp_nonpositive(typename Wide<Bytes>::DoubleV& x) {
  using DoubleV = typename Wide<Bytes>::DoubleV;
  const auto& c = kInverseFactorials;
  const DoubleV shifted = x * 1.4426950408889634 + 0x1.8p52;  // round(x / ln2) in the low mantissa bits
  const DoubleV n = shifted - 0x1.8p52;
  const DoubleV r = (x - n * 0x1.62e42fee00000p-1) - n * 0x1.a39ef35793c76p-33;  // ln2 in two parts: n * hi exact
  const DoubleV r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
  const DoubleV p2 = c[2] + c[3] * r, p4 = c[4] + c[5] * r, p6 = c[6] + c[7] * r, p8 = c[8] + c[9] * r;
  const DoubleV p10 = c[10] + c[11] * r, p12 = c[12] + c[13] * r;
  const DoubleV q = ((p2 + r2 * p4) + r4 * (p6 + r2 * p8)) + r8 * (p10 + r2 * p12);  // sum of r^(j-2) / j!, j >= 2
  const DoubleV two_to_n = (DoubleV)(((typename Wide<Bytes>::Int64V)shifted + 1023) << 52);
  x = x < -708.0 ? DoubleV{} : (1.0 + (r + r2 * q)) * two_to_n;
}

template <int Bytes>
[[gnu::always_inline]] inline double sum_weights_wide(const float* row, int n, float t, float max, double floor) {
  using W = Wide<Bytes>;
  constexpr int kFloats = Bytes / 4, kDoubles = Bytes / 8;
  typename W::DoubleV lanes[8 / kDoubles] = {};  // lanes i % 8, in order
  auto add_eight = [&](const float* p) {
    for (int f = 0; f < 8; f += kFloats) {
      typename W::FloatV d;
      std::memcpy(&d, p + f, sizeof d);
      d = d / t - max;  // the old sampler's float arithmetic
      typename W::HalfFloatV half[2];
      std::memcpy(half, &d, sizeof d);
      for (int h = 0; h < 2; ++h) {
        typename W::DoubleV w = __builtin_convertvector(half[h], typename W::DoubleV);
        exp_nonpositive<Bytes>(w);
        lanes[f / kDoubles + h] += w >= floor ? w : typename W::DoubleV{};
      }
    }
  };
  int i = 0;
  for (; i + 8 <= n; i += 8) add_eight(row + i);
  if (i < n) {
    float tail[8];
    std::fill(std::copy(row + i, row + n, tail), tail + 8, -kInf);
    add_eight(tail);
  }
  double lane_totals[8];
  std::memcpy(lane_totals, lanes, sizeof lane_totals);
  double total = 0.0;
  for (const double lane : lane_totals) total += lane;
  return total;
}

#if !defined(__AVX2__)
__attribute__((target("avx2"))) double sum_weights_avx2(const float* row, int n, float t, float max, double floor) {
  return sum_weights_wide<32>(row, n, t, max, floor);
}
#endif

// Sum over i of the weights exp(double(row[i] / t - max)) (the old sampler's), counting those >= floor only (min-p),
// in double.
double sum_weights(const float* row, int n, float t, float max, double floor) {
#if defined(__AVX2__)
  return sum_weights_wide<32>(row, n, t, max, floor);
#else
  if (__builtin_cpu_supports("avx2")) return sum_weights_avx2(row, n, t, max, floor);
  return sum_weights_wide<16>(row, n, t, max, floor);
#endif
}

// The first index of the highest logit (NaN ignored); 0 when there is none. One pass over blocks, then a scan from
// the first block holding the maximum.
int32_t argmax(const float* row, int n) {
  float best = -kInf;
  int from = 0, b = 0;
  for (; b + kBlock <= n; b += kBlock) {
    const FloatV m = block_max(row + b);
    if (!lane_bits(m > best)) continue;
    best = max_of_lanes(m);
    from = b;
  }
  for (int i = b; i < n; ++i) {
    if (!(row[i] > best)) continue;
    best = row[i];
    from = i;
  }
  for (int i = from; i < n; ++i)
    if (row[i] == best) return i;
  return 0;
}

// A raw logit bound for a scaled one, loosened by 2^-20 of it in `direction` (-1: fl(x / t) >= scaled implies x above
// the bound; +1: fl(x / t) < scaled implies x below it).
float raw_bound(float scaled, float t, double direction) {
  const double x = double(scaled) * t;
  return float(x + direction * (std::fabs(x) * 0x1p-20 + 1e-30));
}

// Appends (row[i] / t, i) for every i whose scaled logit is in [floor, below): blocks and lanes are tested on the raw
// logits against loosened bounds, the tokens that pass on their scaled value.
void gather_band(const float* row, int n, float t, float floor, float below, std::vector<Candidate>& out) {
  const float low = raw_bound(floor, t, -1.0), high = raw_bound(below, t, 1.0);
  auto take = [&](int i) {
    const float s = row[i] / t;
    if (s >= floor && s < below) out.emplace_back(s, i);
  };
  int b = 0;
  for (; b + kBlock <= n; b += kBlock) {
    if (!lane_bits(block_max(row + b) >= low)) continue;
    for (int j = b; j < b + kBlock; j += kLanes) {
      const FloatV v = load(row + j);
      for (unsigned bits = lane_bits((v >= low) & (v < high)); bits != 0; bits &= bits - 1)
        take(j + std::countr_zero(bits));
    }
  }
  for (; b < n; ++b) take(b);
}

void keep_best(std::vector<Candidate>& out, int k) {
  std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), ranks_before);
  out.resize(size_t(k));
}

// out = the k (<= n) best (logit, id) of row in rank order, unsorted; NaN left out. Small k: one pass keeping a buffer
// of at most 2k + 64 that is cut back to the best k when full; once cut, only values above the k-th can enter (a later
// equal value has a higher id, so it ranks below), and whole blocks below it are skipped.
void select_top(const float* row, int n, int k, std::vector<Candidate>& out) {
  out.clear();
  const size_t capacity = k >= n / 4 ? size_t(n) : 2 * size_t(k) + 64;
  bool cut = false;
  float kth = -kInf;
  for (int b = 0; b < n; b += kBlock) {
    const int end = std::min(n, b + kBlock);
    if (cut && end - b == kBlock && !lane_bits(block_max(row + b) > kth)) continue;
    for (int i = b; i < end; ++i) {
      if (cut ? !(row[i] > kth) : !(row[i] >= kth)) continue;
      out.emplace_back(row[i], i);
      if (out.size() < capacity) continue;
      keep_best(out, k);
      kth = out[size_t(k) - 1].first;  // the k-th best: no kept logit is lower
      cut = true;
    }
  }
  if (out.size() > size_t(k)) keep_best(out, k);
}

// out = the top k (< n) of row / t in rank order, unsorted. Selected on the raw logits, which rank the same unless
// division makes distinct logits equal: if the (k+1)-th raw logit scales to the k-th's value, the tokens scaled at or
// above that value are gathered and selected again.
void select_top_scaled(const float* row, int n, float t, int k, std::vector<Candidate>& out) {
  select_top(row, n, k + 1, out);
  const auto next = std::max_element(out.begin(), out.end(), ranks_before);  // the last in rank order
  const float next_scaled = out.size() > size_t(k) ? next->first / t : -kInf;
  if (out.size() > size_t(k)) out.erase(next);
  float kth = kInf;
  for (Candidate& c : out) kth = std::min(kth, c.first /= t);
  if (next_scaled < kth) return;
  out.clear();
  gather_band(row, n, t, kth, kInf, out);
  keep_best(out, k);
}

// The candidates in rank order, built lazily: the sorted part grows in chunks (64, then three times what is sorted)
// picked with nth_element, so a walk that stops early costs a selection, not a sort. Without a complete list
// (top-k), candidates come from the row band by band, a band gathered when the list is used up (its tokens rank
// below all before). A walk ends after the last candidate or at the first whose weight is 0 or below min_weight
// (those after it weigh no more). Weights: std::exp(double(logit - max)), the old sampler's.
class RankedCandidates {
 public:
  RankedCandidates(std::vector<Candidate>& list, std::vector<double>& weights, float max, double min_weight)
      : list_(list), weights_(weights), max_(max), min_weight_(min_weight) {
    weights_.clear();
  }

  // Empties the list, to be gathered from row / t by bands. Tokens weighing less than safe_weight cannot reach the
  // mass the walk needs (together they weigh less than half of the rest). Band floors: optimistic ones first (4096 and
  // 64 x safe_weight, unless they would hold only the maximum), then the safe one, then the min-p cut (tokens below
  // it are dropped anyway) or -inf (for rounding only).
  void gather_from(const float* row, int n, float t, double safe_weight) {
    list_.clear();
    row_ = row, n_ = n, t_ = t;
    const float last = floor_for_weight(min_weight_);
    for (const double factor : {4096.0, 64.0, 1.0}) {
      const float floor = floor_for_weight(factor * safe_weight);
      if (floor <= last) break;
      if (factor * safe_weight < 1.0 || factor == 1.0) floors_[bands_++] = floor;
    }
    floors_[bands_++] = last;
  }

  // The weight of the i-th candidate in rank order; false when the walk has ended before it.
  bool weight(size_t i, double& w) {
    while (i >= weights_.size())
      if (!extend()) return false;
    w = weights_[i];
    return true;
  }
  int32_t id(size_t i) const { return list_[i].second; }

 private:
  // The floor leaving out only tokens that weigh less than bound, with a margin for rounding; -inf for bound <= 0.
  float floor_for_weight(double bound) const {
    if (!(bound > 0.0)) return -kInf;
    return float(double(max_) + std::log(bound) - 1e-3 - 1e-6 * std::fabs(double(max_)));
  }

  bool extend() {
    const size_t from = weights_.size();
    for (; !below_min_ && from == list_.size(); ++next_band_) {
      if (next_band_ == bands_) return false;
      const float below = next_band_ == 0 ? kInf : floors_[next_band_ - 1];
      gather_band(row_, n_, t_, floors_[next_band_], below, list_);
    }
    if (below_min_) return false;
    const size_t to = std::min(list_.size(), from + std::max<size_t>(64, 3 * from));
    const auto first = list_.begin() + from, last = list_.begin() + to;
    if (last != list_.end()) std::nth_element(first, last, list_.end(), ranks_before);
    std::sort(first, last, ranks_before);
    for (auto c = first; c != last && !below_min_; ++c) {
      const double w = std::exp(double(c->first - max_));
      below_min_ = !(w > 0.0 && w >= min_weight_);
      if (!below_min_) weights_.push_back(w);
    }
    return weights_.size() > from;
  }

  std::vector<Candidate>& list_;
  std::vector<double>& weights_;
  const float max_;
  const double min_weight_;
  bool below_min_ = false;
  const float* row_ = nullptr;  // bands: [floors_[j], floors_[j - 1]) of row_ / t_
  int n_ = 0;
  float t_ = 1.0f;
  std::array<float, 4> floors_{};
  size_t bands_ = 0, next_band_ = 0;
};

// The old sampler's rule over ranked candidates (total: their summed weight): top-p keeps a candidate while the mass
// before it, over total, is below top_p; then r = u x the kept total, and the first candidate whose running sum
// exceeds r is drawn (the last one if rounding leaves r beyond them all).
int32_t walk(RankedCandidates& ranked, double total, float top_p, double u) {
  double w = 0.0;
  size_t keep = std::numeric_limits<size_t>::max();
  if (top_p < 1.0f) {
    double mass = 0.0;
    for (keep = 0; ranked.weight(keep, w);) {
      ++keep;
      if ((mass += w / total) >= top_p) break;
    }
    total = 0.0;
    for (size_t j = 0; j < keep && ranked.weight(j, w); ++j) total += w;
  }
  const double r = u * total;
  double acc = 0.0;
  size_t i = 0;
  for (; i < keep && ranked.weight(i, w); ++i)
    if (r < (acc += w)) return ranked.id(i);
  return ranked.id(i > 0 ? i - 1 : 0);
}

// The seeded draw over row / t (max: the largest scaled logit, finite): min-p, top-k, top-p, then the walk.
int32_t draw(const float* row, int n, float t, float max, const SamplingOptions& o, uint32_t sample_index,
             std::vector<Candidate>& candidates, std::vector<double>& weights) {
  const double u = uniform_from_key(draw_key(o.seed, sample_index));
  const double min_weight = o.min_p;  // p_i < min_p x p_max  <=>  e^(l_i - max) < min_p
  RankedCandidates ranked(candidates, weights, max, min_weight);
  double total = 0.0;
  if (o.top_k > 0 && o.top_k < n) {
    select_top_scaled(row, n, t, o.top_k, candidates);
    if (candidates.size() <= kSortWhole) std::sort(candidates.begin(), candidates.end(), ranks_before);
    for (const Candidate& c : candidates) {
      const double w = std::exp(double(c.first - max));
      if (w > 0.0 && w >= min_weight) total += w;
    }
  } else {
    // The walk needs the head up to the mass top_p x total (top-p) or r = u x total: tokens that weigh less than
    // (total - mass) / 2n each leave the head at least (total + mass) / 2.
    total = sum_weights(row, n, t, max, min_weight);
    const double mass = (o.top_p < 1.0f ? double(o.top_p) : u) * total;
    ranked.gather_from(row, n, t, (total - mass) / (2.0 * n));
  }
  return walk(ranked, total, o.top_p, u);
}

// The top_n best (id, logprob) of the raw row, best first, ties lower id first.
std::vector<std::pair<int32_t, float>> top_logprobs(const float* row, int n, int top_n, double lse,
                                                    std::vector<Candidate>& scratch) {
  std::vector<std::pair<int32_t, float>> top;
  if (std::min(top_n, n) <= 0) return top;
  select_top(row, n, std::min(top_n, n), scratch);
  std::sort(scratch.begin(), scratch.end(), ranks_before);
  for (const Candidate& c : scratch) top.emplace_back(c.second, float(double(c.first) - lse));
  return top;
}

// The response format's mask, logit biases, then repetition, then frequency and presence penalties, then the masks,
// in place (vLLM's order); ids outside the row are ignored. saved (when not null) gets (id, value before) for each
// change.
void penalise_and_mask(float* logits, int n, const SampleRequest& request, SavedLogits* saved) {
  const SamplingOptions& o = *request.options;
  auto change = [&](int32_t id, auto&& update) {
    if (id < 0 || id >= n) return;
    if (saved != nullptr) saved->emplace_back(id, logits[id]);
    logits[id] = update(logits[id]);
  };
  if (!request.allowed.empty()) {  // not saved: a masked id is never the sampled one, whose raw logit is asked
    for (int id = 0; id < n; ++id)
      if (!((request.allowed[static_cast<size_t>(id) / 64] >> (id % 64)) & 1u)) logits[id] = -kInf;
  }
  for (const LogitBias& b : o.logit_bias) change(b.id, [bias = b.bias](float l) { return l + bias; });
  const float r = o.repetition_penalty;
  if (request.history != nullptr && r != 1.0f)
    for (const int32_t id : request.history->seen()) change(id, [r](float l) { return l > 0.0f ? l / r : l * r; });
  if (request.history != nullptr && (o.frequency_penalty != 0.0f || o.presence_penalty != 0.0f)) {
    for (const auto& [id, count] : request.history->output_counts()) {
      const float penalty = o.frequency_penalty * float(count) + (count > 0 ? o.presence_penalty : 0.0f);
      change(id, [penalty](float l) { return l - penalty; });
    }
  }
  for (const int32_t id : request.masked_ids) change(id, [](float) { return -kInf; });
}

// The raw logit of id: the first value saved before the row was changed there, else the row's.
float raw_logit(const float* logits, const SavedLogits& saved, int32_t id) {
  for (const auto& [saved_id, value] : saved)
    if (saved_id == id) return value;
  return logits[id];
}

}  // namespace

int32_t Sampler::choose(const float* logits, int n, const SamplingOptions& o, uint32_t sample_index) {
  if (o.temperature <= 0.0f || o.top_k == 1 || n <= 1) return argmax(logits, n);
  const float max = max_of(logits, n) / o.temperature;  // division rounds monotonically: the largest scaled logit
  if (!std::isfinite(max)) return argmax(logits, n);     // every token masked, or logits / temperature overflow
  return draw(logits, n, o.temperature, max, o, sample_index, candidates_, probs_);
}

int32_t Sampler::sample(const float* logits, int vocab_size, const SamplingOptions& options, uint32_t sample_index) {
  return choose(logits, vocab_size, options, sample_index);
}

TokenLogprobs Sampler::logprobs_of(const float* logits, int vocab_size, int32_t token, int top_n) {
  TokenLogprobs out;
  const float max = max_of(logits, vocab_size);
  const double lse = std::isfinite(max) ? max + std::log(sum_weights(logits, vocab_size, 1.0f, max, 0.0)) : max;
  for (const auto& [id, logprob] : top_logprobs(logits, vocab_size, top_n, lse, candidates_)) {
    out.top_ids.push_back(id);
    out.top_logprobs.push_back(logprob);
  }
  out.logprob = token >= 0 && token < vocab_size ? float(double(logits[token]) - lse) : -kInf;
  return out;
}

SampledToken Sampler::sample(float* logits, int vocab_size, const SampleRequest& request) {
  const SamplingOptions& o = *request.options;
  const bool with_logprobs = o.logprobs >= 0 && vocab_size > 0;
  SampledToken out;
  double lse = 0.0;  // log(sum_i e^logit_i) of the raw row
  if (with_logprobs) {
    const float max = max_of(logits, vocab_size);
    lse = std::isfinite(max) ? max + std::log(sum_weights(logits, vocab_size, 1.0f, max, 0.0)) : max;
    out.top = top_logprobs(logits, vocab_size, o.logprobs, lse, candidates_);
  }
  raw_saved_.clear();
  SavedLogits* saved = with_logprobs ? &raw_saved_ : nullptr;
  penalise_and_mask(logits, vocab_size, request, saved);
  out.token = choose(logits, vocab_size, o, request.sample_index);
  if (with_logprobs) out.logprob = float(double(raw_logit(logits, raw_saved_, out.token)) - lse);
  return out;
}

bool takes_raw_argmax(const SamplingOptions& o, bool masked) {
  return (o.temperature <= 0.0f || o.top_k == 1) && !o.has_penalties() && o.logit_bias.empty() && !o.structured() &&
         o.logprobs < 0 && !masked;
}

RowBest row_best(const float* row, int n, int32_t first) {
  if (n <= 0) return {-kInf, first};
  const int32_t at = argmax(row, n);
  // argmax ignores NaN; a shard of NaN only (at 0) must lose to any other shard's value.
  return {std::isnan(row[at]) ? -kInf : row[at], first + at};
}

void merge_row_bests(std::span<const RowBest> bests, int shards, int rows, std::span<int32_t> tokens) {
  for (int r = 0; r < rows; ++r) {
    RowBest best = bests[size_t(r)];
    for (int s = 1; s < shards; ++s) {
      const RowBest& b = bests[size_t(s) * size_t(rows) + size_t(r)];
      if (b.logit > best.logit) best = b;  // equal: the earlier shard holds the lower id
    }
    tokens[size_t(r)] = best.id;
  }
}

void BatchSampler::sample_rows(float* logits, int vocab_size, std::span<const SampleRequest> requests,
                               std::span<SampledToken> out, cpu::ThreadPool& pool) {
  const int rows = static_cast<int>(requests.size());
  samplers_.resize(size_t(pool.size()));
  const int tasks = std::min(pool.size(), rows);
  // Task t samples rows t, t + tasks, ... with samplers_[t]: each Sampler's scratch is used by one thread at a time.
  pool.parallel_for(tasks, [&](int t) {
    for (int r = t; r < rows; r += tasks)
      out[r] = samplers_[t].sample(logits + size_t(r) * size_t(vocab_size), vocab_size, requests[r]);
  });
}

}  // namespace actord
