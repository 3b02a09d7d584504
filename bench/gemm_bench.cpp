// Microbenchmark of the CPU GEMM (executors/cpu/gemm.hpp) on the shapes of a 134M Llama (hidden 768, ffn 2048,
// vocab 32000): GFLOP/s and weight bandwidth at decode (m = 1, 8, 32) and prefill (m = 128) sizes, bf16 and f32.
// Then a whole decode step's products over all the model's matrices (weights streaming from DRAM).
// Usage: actord_gemm_bench [threads] [step | ISA [ROWS,...]]   (step: only the whole decode step, e.g. AMX against
//        AVX512-BF16; ISA: the per-shape table through that instruction set, e.g. avx2 on an AVX-512 CPU; ROWS: only
//        that table, bf16 only, at those rows)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/decode_step.hpp"
#include "bench/isa_argument.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/thread_pool.hpp"

using namespace actord;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const bool step_only = argc > 2 && std::string(argv[2]) == "step";
  cpu::Isa table_isa = cpu::Isa::automatic;
  if (argc > 2 && !step_only) {
    const auto isa = bench::isa_argument(argv[2]);
    if (!isa) return 2;
    table_isa = *isa;
  }
  std::vector<int> table_rows = {1, 8, 16, 32, 64, 128, 512};
  std::vector<DType> table_dtypes = {DType::bf16, DType::f32};
  if (argc > 3 && !step_only) {
    table_rows.clear();
    for (const char* p = argv[3]; *p;) {
      char* end = nullptr;
      const long rows = std::strtol(p, &end, 10);
      if (end == p || rows <= 0) {
        std::fprintf(stderr, "rows: a comma-separated list of positive numbers, not '%s'\n", argv[3]);
        return 2;
      }
      table_rows.push_back(static_cast<int>(rows));
      p = *end == ',' ? end + 1 : end;
    }
    table_dtypes = {DType::bf16};
  }
  cpu::ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  struct Shape { int n, k; const char* what; };
  // The model's products, then a rank-16 LoRA adapter's (plugins/lora_adapter.hpp): A [16, 768], B [768 | 2048, 16].
  const Shape shapes[] = {{768, 768, "q/o proj"}, {2048, 768, "gate/up"}, {768, 2048, "down"}, {32000, 768, "lm_head"},
                          {16, 768, "lora A"},    {768, 16, "lora B"},    {2048, 16, "lora B ff"}};
  std::printf("isa %s (table: %s), %d threads\n", cpu::isa_name(cpu::detected_isa()), cpu::isa_name(table_isa),
              threads);
  std::printf("%-10s %6s %6s %5s %5s %-8s %10s %10s %10s\n", "weight", "n", "k", "dtype", "m", "path", "us", "GFLOP/s",
              "GB/s(W)");
  for (DType dtype : table_dtypes) {
    if (step_only) break;
    for (const Shape& s : shapes) {
      std::vector<float> w32(size_t(s.n) * s.k);
      for (auto& v : w32) v = dist(rng);
      std::vector<unsigned char> w(w32.size() * dtype_size(dtype));
      convert_from_f32(dtype, w32.data(), w.data(), w32.size());
      const cpu::WeightMatrix wm{dtype, w.data(), s.n, s.k, 0};
      std::vector<unsigned char> blocked_storage(cpu::blocked_bytes(dtype, s.n, s.k));
      const cpu::WeightMatrix blocked = cpu::pack_blocked(wm, blocked_storage.data());
      for (int m : table_rows)
      for (int variant = 0; variant < 6; ++variant) {
        // The row-major kernels, then the blocked layout (what the engine loads models into).
        // Variant 5: blocked bf16 weights through the AVX512-BF16 dot products (x rounded to bf16).
        const cpu::Kernel kernels[] = {cpu::Kernel::rows, cpu::Kernel::packed, cpu::Kernel::blas,
                                       cpu::Kernel::automatic, cpu::Kernel::automatic, cpu::Kernel::automatic};
        const cpu::Kernel kernel = kernels[variant];
        const bool use_blocked = variant >= 4, dot_bf16 = variant == 5;
        if (kernel == cpu::Kernel::blas && !cpu::have_blas()) continue;
        if (dot_bf16 && (dtype != DType::bf16 || !cpu::cpu_has_avx512_bf16() || table_isa != cpu::Isa::automatic))
          continue;
        const cpu::GemmPath path{dot_bf16 ? cpu::Isa::avx512_bf16 : table_isa, kernel};
        const cpu::WeightMatrix& wm_used = use_blocked ? blocked : wm;
        std::vector<float> x(size_t(m) * s.k, 0.5f), y(size_t(m) * s.n);
        cpu::gemm_nt(x.data(), wm_used, nullptr, y.data(), m, pool, path);  // warm-up
        // Best of many runs: this machine shares its cores, so averages mostly measure the neighbours.
        double best = 1e30, elapsed = 0;
        const auto start = std::chrono::steady_clock::now();
        do {
          const auto t0 = std::chrono::steady_clock::now();
          cpu::gemm_nt(x.data(), wm_used, nullptr, y.data(), m, pool, path);
          const auto t1 = std::chrono::steady_clock::now();
          best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
          elapsed = std::chrono::duration<double>(t1 - start).count();
        } while (elapsed < 0.3);
        const double us = best * 1e6;
        const double flops = 2.0 * m * s.n * s.k;
        std::printf("%-10s %6d %6d %5s %5d %-8s %10.1f %10.1f %10.1f\n", s.what, s.n, s.k, dtype_name(dtype), m,
                    dot_bf16 ? "blk-dpbf16" : use_blocked ? "blocked" : cpu::kernel_name(kernel), us,
                    flops / us / 1e3, double(w.size()) / us / 1e3);
      }
    }
  }

  // A decode step's products of the whole model, every matrix its own blocked bf16 copy (268 MB from DRAM).
  if (argc <= 3 || step_only) {
    std::vector<std::vector<unsigned char>> storage;
    const auto random_bf16 = [&](int n, int k) { return bench::random_bf16(n, k, rng, dist); };
    bench::DecodeStep model(
        [&](int n, int k) {
          const std::vector<unsigned char> raw = random_bf16(n, k);
          storage.emplace_back(cpu::blocked_bytes(DType::bf16, n, k));
          return cpu::pack_blocked(cpu::WeightMatrix{DType::bf16, raw.data(), n, k, 0}, storage.back().data());
        },
        [&](int ff, int k) {
          const std::vector<unsigned char> gate = random_bf16(ff, k), up = random_bf16(ff, k);
          storage.emplace_back(cpu::glu_bytes(DType::bf16, ff, k));
          return cpu::pack_glu(cpu::WeightMatrix{DType::bf16, gate.data(), ff, k, 0},
                               cpu::WeightMatrix{DType::bf16, up.data(), ff, k, 0}, storage.back().data());
        });
    std::printf("\nwhole decode step (12 layers + lm_head, bf16 blocked, weights streamed from DRAM or an L3 larger than them; AMX: %s)\n%5s %-12s %10s %10s\n",
                cpu::amx_status(),
                "m", "isa", "ms/step", "GFLOP/s");
    for (int m : {1, 8, 32, 64, 256, 1024})
    for (cpu::Isa isa : {cpu::Isa::automatic, cpu::Isa::avx2, cpu::Isa::avx512_bf16, cpu::Isa::amx}) {
      if (isa == cpu::Isa::avx2 && cpu::detected_isa() == cpu::Isa::avx2) continue;  // automatic already
      if (isa == cpu::Isa::avx512_bf16 && !cpu::cpu_has_avx512_bf16()) continue;
      if (isa == cpu::Isa::amx && !cpu::amx_ready()) continue;
      const cpu::GemmPath path{isa, cpu::Kernel::automatic};
      model.run(m, pool, path);
      double best = 1e30;
      for (int r = 0; r < 8; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        model.run(m, pool, path);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%5d %-12s %10.2f %10.1f\n", m, cpu::isa_name(isa), best * 1e3, 2.0 * bench::DecodeStep::macs(m) / best / 1e9);
    }
  }
}
