// The p-th percentile (0-100) of a sample, interpolated between ranks; 0 for none. Used by the benchmarks' reports
// and the workers' own timing reports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace actord {

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace actord
