#include "executors/cpu/gemm.hpp"

#include <algorithm>
#include <vector>

#include "executors/cpu/thread_pool.hpp"

namespace actord::cpu {

Isa detected_isa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
      return Isa::avx2;
    }
    return Isa::portable;
  }();
  return isa;
}

const char* isa_name(Isa isa) { return isa == Isa::avx2 ? "avx2" : "portable"; }

void gemm_nt_rows_portable(const float* x, const WeightMatrix& w, const float* bias, float* y, int m,
                           int64_t n_begin, int64_t n_end) {
  const int64_t k = w.cols, n = w.rows;
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = n_begin; j < n_end; ++j) {
    convert_to_f32(w.dtype, w.row(j), row.data(), static_cast<size_t>(k));
    for (int i = 0; i < m; ++i) {
      const float* xi = x + static_cast<int64_t>(i) * k;
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += xi[t] * row[t];
      y[static_cast<int64_t>(i) * n + j] = acc + (bias ? bias[j] : 0.0f);
    }
  }
}

void gemm_nt(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, ThreadPool& pool, Isa isa) {
  const int64_t n = w.rows;
  // Enough tasks to balance the threads, each a multiple of the 4-row micro-tile; tiny products (a few
  // microseconds) run on the calling thread, where waking the pool would cost more than it saves.
  constexpr int64_t kMinMacsPerTask = 1 << 16;
  const int64_t macs = static_cast<int64_t>(m) * n * w.cols;
  const int64_t target_tasks = std::clamp<int64_t>(macs / kMinMacsPerTask, 1, pool.size() * 4);
  const int64_t chunk = std::max<int64_t>(16, ((n + target_tasks - 1) / target_tasks + 3) / 4 * 4);
  const int tasks = static_cast<int>((n + chunk - 1) / chunk);
  auto kernel = isa == Isa::avx2 ? &gemm_nt_rows_avx2 : &gemm_nt_rows_portable;
  pool.parallel_for(tasks, [&](int t) {
    const int64_t begin = t * chunk;
    kernel(x, w, bias, y, m, begin, std::min(n, begin + chunk));
  });
}

}  // namespace actord::cpu
