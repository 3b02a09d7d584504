// Where two-batch overlap (and its generalisation to m micro-batches, groups[].micro_batches) cuts a step's batch:
// whole sequences, in batch order, micro-batch k the slices [bounds[k], bounds[k + 1]), each cut k (1 .. m - 1) at
// the earliest position closest to k / m of the step's tokens. The workers cut their batch with it and the scheduler
// computes the same cuts to tell every rank of lanes and AFD pools how many tokens the busiest lane's micro-batch k
// runs (ExecuteStep.laneTokensPerMicroBatch).
//
// Contract: pure. `tokens_of(i)` is slice i's token count. With n >= m every micro-batch has a slice at least; with
// fewer slices the last micro-batches are empty. m = 2 cuts where the two halves' tokens differ least.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace actord {

template <class TokensOf>
std::vector<size_t> micro_batch_bounds(size_t n, int m, TokensOf&& tokens_of) {
  const size_t parts = static_cast<size_t>(std::max(m, 1));
  std::vector<size_t> bounds(parts + 1, n);
  bounds[0] = 0;
  if (n < parts) {  // one slice each, then empty micro-batches
    for (size_t k = 1; k <= parts; ++k) bounds[k] = std::min(k, n);
    return bounds;
  }
  std::vector<int64_t> before(n + 1, 0);  // tokens of the slices before position i
  for (size_t i = 0; i < n; ++i) before[i + 1] = before[i] + static_cast<int64_t>(tokens_of(i));
  const int64_t total = before[n];
  for (size_t k = 1; k < parts; ++k) {
    // Leave a slice for this micro-batch and for each one after it.
    const size_t lo = bounds[k - 1] + 1, hi = n - (parts - k);
    size_t best = lo;
    int64_t best_gap = INT64_MAX;
    for (size_t i = lo; i <= hi; ++i) {
      const int64_t gap = std::llabs(static_cast<int64_t>(parts) * before[i] - static_cast<int64_t>(k) * total);
      if (gap < best_gap) {
        best_gap = gap;
        best = i;
      }
    }
    bounds[k] = best;
  }
  return bounds;
}

// The tokens of each micro-batch.
template <class TokensOf>
std::vector<int64_t> micro_batch_tokens(size_t n, int m, TokensOf&& tokens_of) {
  const std::vector<size_t> bounds = micro_batch_bounds(n, m, tokens_of);
  std::vector<int64_t> tokens(bounds.size() - 1, 0);
  for (size_t k = 0; k + 1 < bounds.size(); ++k)
    for (size_t i = bounds[k]; i < bounds[k + 1]; ++i) tokens[k] += static_cast<int64_t>(tokens_of(i));
  return tokens;
}

}  // namespace actord
