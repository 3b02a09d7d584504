// split_row_tasks (executors/cpu/row_tasks.hpp): how a product's weight rows become thread-pool tasks.
#include <catch2/catch.hpp>

#include <vector>

#include "executors/cpu/row_tasks.hpp"

using namespace actord;

namespace {

// Checks the contract's invariants: every row of every output once, in order; tasks of one output each; begins on
// granules; whole granules except an output's last task. Returns the tasks' sizes.
std::vector<int64_t> check_cover(const std::vector<int64_t>& rows, const std::vector<cpu::RowTask>& tasks,
                                 int64_t granule) {
  std::vector<int64_t> sizes;
  size_t t = 0;
  for (int o = 0; o < static_cast<int>(rows.size()); ++o) {
    int64_t next = 0;
    while (next < rows[o]) {
      REQUIRE(t < tasks.size());
      const cpu::RowTask& task = tasks[t++];
      REQUIRE(task.output == o);
      REQUIRE(task.begin == next);
      REQUIRE(task.begin % granule == 0);
      REQUIRE(task.end > task.begin);
      REQUIRE(task.end <= rows[o]);
      if (task.end < rows[o]) REQUIRE((task.end - task.begin) % granule == 0);
      sizes.push_back(task.end - task.begin);
      next = task.end;
    }
  }
  REQUIRE(t == tasks.size());
  return sizes;
}

}  // namespace

TEST_CASE("split_row_tasks covers every row once in guided chunks that shrink toward the end", "[row_tasks]") {
  SECTION("lm_head at one row: big tasks first, ~65k multiply-add ones last") {
    const std::vector<int64_t> rows = {32000};
    const std::vector<cpu::RowTask>& tasks = cpu::split_row_tasks(rows, 1, 768, 32, 32, 2);
    const std::vector<int64_t> sizes = check_cover(rows, tasks, 32);
    REQUIRE(sizes.front() == 8000);  // a quarter of the work: 1 / (2 x 2 threads)
    for (size_t i = 1; i < sizes.size(); ++i) REQUIRE(sizes[i] <= sizes[i - 1]);
    REQUIRE(sizes.back() * 768 <= 2 * (1 << 16));  // the last tasks: ~65k multiply-adds, whole 32-row blocks
    REQUIRE(tasks.size() < 40);  // claims stay few
  }
  SECTION("several outputs share one guided sequence and no task spans two") {
    const std::vector<int64_t> rows = {768, 256, 256};
    const std::vector<cpu::RowTask>& tasks = cpu::split_row_tasks(rows, 4, 768, 32, 32, 2);
    const std::vector<int64_t> sizes = check_cover(rows, tasks, 32);
    REQUIRE(sizes.front() == 320);  // 1280 / 4, whole blocks
    REQUIRE(tasks.back().output == 2);
  }
  SECTION("an output's last task may end inside a granule") {
    const std::vector<int64_t> rows = {1000, 37};
    const std::vector<cpu::RowTask>& tasks = cpu::split_row_tasks(rows, 8, 512, 24, 16, 3);
    check_cover(rows, tasks, 24);
  }
  SECTION("tiny products and one thread: one task per output") {
    const std::vector<int64_t> rows = {16, 0, 8};
    const std::vector<cpu::RowTask>& tasks = cpu::split_row_tasks(rows, 1, 64, 4, 16, 2);
    REQUIRE(tasks.size() == 2);
    check_cover(rows, tasks, 4);
    const std::vector<int64_t> big = {4096};
    const std::vector<cpu::RowTask>& one_thread = cpu::split_row_tasks(big, 64, 4096, 32, 32, 1);
    REQUIRE(one_thread.size() == 1);
    check_cover(big, one_thread, 32);
  }
  SECTION("more threads, smaller first tasks; min_rows bounds the smallest") {
    const std::vector<int64_t> rows = {4096};
    const std::vector<cpu::RowTask>& tasks = cpu::split_row_tasks(rows, 32, 2048, 4, 64, 8);
    const std::vector<int64_t> sizes = check_cover(rows, tasks, 4);
    REQUIRE(sizes.front() == 256);  // 4096 / 16
    for (size_t i = 0; i + 1 < sizes.size(); ++i) REQUIRE(sizes[i] >= 64);
  }
}
