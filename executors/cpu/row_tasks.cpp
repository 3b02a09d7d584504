#include "executors/cpu/row_tasks.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace actord::cpu {

const std::vector<RowTask>& split_row_tasks(std::span<const int64_t> rows, int m, int64_t k, int64_t granule,
                                            int64_t min_rows, int threads) {
  ACTORD_CHECK(granule > 0 && m > 0 && k > 0 && threads > 0);
  constexpr int64_t kMinMacsPerTask = 1 << 16;
  thread_local std::vector<RowTask> tasks;
  tasks.clear();
  int64_t unclaimed = 0;
  for (int64_t n : rows) unclaimed += n;
  const int64_t macs_per_row = static_cast<int64_t>(m) * k;
  if (threads == 1 || unclaimed * macs_per_row < kMinMacsPerTask) {
    for (int o = 0; o < static_cast<int>(rows.size()); ++o)
      if (rows[o] > 0) tasks.push_back({o, 0, rows[o]});
    return tasks;
  }
  const auto whole_granules = [granule](int64_t n) { return (n + granule - 1) / granule * granule; };
  const int64_t smallest =
      whole_granules(std::max(min_rows, (kMinMacsPerTask + macs_per_row - 1) / macs_per_row));
  for (int o = 0; o < static_cast<int>(rows.size()); ++o) {
    for (int64_t begin = 0; begin < rows[o];) {
      const int64_t size = std::max(smallest, whole_granules(unclaimed / (2 * int64_t{threads})));
      const int64_t end = std::min(rows[o], begin + size);
      tasks.push_back({o, begin, end});
      unclaimed -= end - begin;
      begin = end;
    }
  }
  return tasks;
}

}  // namespace actord::cpu
