#include "executors/sampler.hpp"

#include <algorithm>
#include <cmath>

namespace actord {

double uniform_from_key(uint64_t key) {
  uint64_t z = key + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(const float* logits, int vocab_size, const SamplingOptions& o, uint32_t sample_index) {
  if (o.temperature <= 0.0f || o.top_k == 1) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab_size; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  candidates_.resize(vocab_size);
  for (int32_t i = 0; i < vocab_size; ++i) candidates_[i] = {logits[i] / o.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < keep) {
    keep = static_cast<size_t>(o.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  const float max_logit = candidates_.front().first;
  double total = 0.0;
  std::vector<double> probs(keep);
  for (size_t i = 0; i < keep; ++i) total += (probs[i] = std::exp(double(candidates_[i].first - max_logit)));
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
  const double r = uniform_from_key(o.seed * 0x100000001b3ull ^ (uint64_t(sample_index) + 1) * 0x9e3779b97f4a7c15ull) * total;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace actord
