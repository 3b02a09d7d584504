// Where two-batch overlap cuts a step's batch: whole sequences, the first micro-batch the slices before the cut,
// the second the rest, cut where the two halves' tokens differ least (the earliest such cut). The workers cut
// their batch with it and the scheduler computes the same cut to tell every rank how many tokens the busiest
// lane's each half runs (ExecuteStep.laneTokens, laneTokens2).
//
// Contract: pure. `slice_tokens` are the slices' token counts in batch order; the result is in [0, n]: n for fewer
// than two slices (all in the first half, the second empty).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace actord {

template <class TokensOf>
size_t two_batch_cut(size_t n, TokensOf&& tokens_of) {
  if (n < 2) return n;
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += static_cast<int64_t>(tokens_of(i));
  size_t cut = 1;
  int64_t before = 0, best = INT64_MAX;
  for (size_t k = 1; k < n; ++k) {
    before += static_cast<int64_t>(tokens_of(k - 1));
    if (const int64_t gap = std::llabs(2 * before - total); gap < best) {
      best = gap;
      cut = k;
    }
  }
  return cut;
}

// The tokens of the two halves.
template <class TokensOf>
std::pair<int64_t, int64_t> two_batch_tokens(size_t n, TokensOf&& tokens_of) {
  const size_t cut = two_batch_cut(n, tokens_of);
  std::pair<int64_t, int64_t> halves{0, 0};
  for (size_t i = 0; i < n; ++i) (i < cut ? halves.first : halves.second) += static_cast<int64_t>(tokens_of(i));
  return halves;
}

}  // namespace actord
