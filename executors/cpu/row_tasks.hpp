// How a product's weight rows (output features) are split into thread-pool tasks.
//
// Contract: split_row_tasks covers rows [0, rows[o]) of every output o exactly once, in order, each task a run of
// one output's rows that begins on a multiple of `granule` and spans whole granules (an output's last task may end
// short, at its row count). Sizes are guided: each task takes about 1 / (2 x threads) of the work still unclaimed,
// rounded up to whole granules and never under ~65k multiply-adds nor `min_rows` rows, so threads claiming tasks in
// order (ThreadPool::parallel_for) finish within one of the last, small tasks of each other: the wait at the end of a
// product is a few microseconds, where equal chunks left one thread idle for up to a whole chunk. A product under
// ~65k multiply-adds in all stays one task per output (waking the pool would cost more than it saves). Which rows a
// task gets never changes an output's bits: each row is computed alone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace actord::cpu {

struct RowTask {
  int output;
  int64_t begin, end;
};

// The split of an m x k product into outputs of rows[o] weight rows each, for `threads` threads: the calling
// thread's list, valid until its next call (the pool's threads may read it while the caller's parallel_for runs).
const std::vector<RowTask>& split_row_tasks(std::span<const int64_t> rows, int m, int64_t k, int64_t granule,
                                            int64_t min_rows, int threads);

}  // namespace actord::cpu
