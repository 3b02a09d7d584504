#include "scheduler/overlap_chooser.hpp"

#include <algorithm>
#include <bit>

namespace actord {

size_t OverlapChooser::bucket_of(int64_t tokens) {
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(tokens, 1));
  return std::min<size_t>(static_cast<size_t>(std::bit_width(t) - 1), std::tuple_size_v<decltype(buckets_)> - 1);
}

bool OverlapChooser::choose_split(int64_t tokens) {
  Bucket& b = buckets_[bucket_of(tokens)];
  ++b.choices;
  bool split;
  if (b.split.chosen < kWarmup || b.whole.chosen < kWarmup || b.split.samples == 0 || b.whole.samples == 0) {
    split = b.split.chosen <= b.whole.chosen;  // warming up (results lag the choices: steps in flight)
  } else {
    const bool faster_split = b.split.per_token_us <= b.whole.per_token_us;
    split = b.choices % kProbeEvery == 0 ? !faster_split : faster_split;
  }
  ++(split ? b.split : b.whole).chosen;
  return split;
}

void OverlapChooser::observe(int64_t tokens, bool split, uint64_t micros) {
  Bucket& b = buckets_[bucket_of(tokens)];
  Mode& m = split ? b.split : b.whole;
  const double per_token = double(micros) / double(std::max<int64_t>(tokens, 1));
  m.per_token_us = m.samples == 0 ? per_token : (1 - kNewest) * m.per_token_us + kNewest * per_token;
  ++m.samples;
}

double OverlapChooser::per_token_us(int64_t tokens, bool split) const {
  const Bucket& b = buckets_[bucket_of(tokens)];
  return split ? b.split.per_token_us : b.whole.per_token_us;
}

}  // namespace actord
