// The machine's limits and the quantized GEMM against them, on the shapes of a 134M Llama (hidden 768, ffn 2048,
// vocab 32000, 12 layers): first what this CPU can do with `threads` threads — memory read bandwidth (streaming a
// buffer far larger than the caches) and the peaks of the multiply instructions present (independent register or
// tile chains): f32 FMA, AVX512-VNNI int8, vdpbf16ps, AMX TDPBF16PS and TDPBSUD — then a whole decode step's
// products (q/k/v and gate/up as multi-output products, o, down, lm_head; each matrix its own copy, so that the
// weights stream from DRAM where the last-level cache is smaller than the model) for bf16 and each quantization, at
// m = 1, 8, 16, 32, 128 rows, on the automatic path and, where it takes the tiles, the vector one beside it: ms per
// step, the weight bytes read per second and their share of the bandwidth, and the multiply-adds per second and
// their share of the peak of the instructions the path uses.
// Usage: actord_quant_bench [threads] [weights: one variant's name, e.g. "int4 g32 zp"; default all ("")]
//        [isa: the step's products through that instruction set only, e.g. avx2 (ACTORD_CPU_HIDE=avx_vnni for an
//        AVX2 CPU without VNNI); default the automatic one]
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/decode_step.hpp"
#include "bench/isa_argument.hpp"
#include "core/quantization.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/thread_pool.hpp"

using namespace actord;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best time of `fn` over ~0.5 s of repetitions (a shared machine: the best run is the one the neighbours spared).
template <class Fn>
double best_of(Fn fn) {
  fn();
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  int runs = 0;
  do {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  } while (++runs < 5 || seconds_since(start) < 0.5);
  return best;
}

__attribute__((target("avx512f"))) float read_sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// GB/s reading 1 GiB split over the pool's threads.
double read_bandwidth(cpu::ThreadPool& pool) {
  const size_t n = (1ull << 30) / sizeof(float);
  float* data = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  pool.parallel_for(pool.size(), [&](int t) {
    const size_t part = n / pool.size();
    std::fill(data + t * part, data + (t + 1) * part, 1.0f);
  });
  std::atomic<float> sink{0};
  const double s = best_of([&] {
    pool.parallel_for(pool.size(), [&](int t) {
      const size_t part = n / pool.size();
      sink = sink + read_sum_avx512(data + t * part, part);
    });
  });
  std::free(data);
  return double(n * sizeof(float)) / s / 1e9;
}

// 16 independent chains (enough to cover latency x throughput on any core); FMA and vdpbf16ps: the library's own
// (cpu::fma_chains, cpu::bf16_dot_chains, what bf16_dot_beats_fma compares).
__attribute__((target("avx512f,avx512vnni"))) int vnni_chains(long iterations) {
  __m512i acc[16];
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (auto& v : acc) v = _mm512_setzero_si512();
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  }
  __m512i s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_epi32(s, acc[j]);
  return _mm512_reduce_add_epi32(s);
}

// Four independent C tiles, operands loaded once: TDPBF16PS (16 x 16 x 32 multiply-adds) or TDPBSUD (16 x 16 x 64).
// The caller has made sure of cpu::amx_ready() (the tile data permission).
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) float amx_chains(long iterations, bool int8) {
  alignas(64) unsigned char config[64] = {};
  config[0] = 1;
  for (int t = 0; t < 8; ++t) {
    const uint16_t colsb = 64;
    std::memcpy(config + 16 + 2 * t, &colsb, 2);
    config[48 + t] = 16;
  }
  asm volatile("" : : "r"(config) : "memory");  // as gemm_amx.cpp: the stores must reach memory
  _tile_loadconfig(config);
  alignas(64) static unsigned char operand[16 * 64];
  std::memset(operand, 1, sizeof(operand));
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (long i = 0; i < iterations; ++i) {
    if (int8) {
      _tile_dpbsud(0, 4, 6);
      _tile_dpbsud(1, 4, 7);
      _tile_dpbsud(2, 5, 6);
      _tile_dpbsud(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

enum class Peak { fma, vnni, bf16_dot, amx_bf16, amx_int8 };

// Giga multiply-adds per second of the pool's threads together: 16 x 16 per FMA round, 16 x 64 per VNNI round,
// 16 x 32 per vdpbf16ps round, 4 x 16 x 16 x 32 (bf16) or x 64 (int8) per round of four tile products.
double peak_gmacs(cpu::ThreadPool& pool, Peak peak) {
  const bool tiles = peak == Peak::amx_bf16 || peak == Peak::amx_int8;
  const long iterations = tiles ? 200'000 : 2'000'000;
  std::atomic<double> sink{0};
  const double s = best_of([&] {
    pool.parallel_for(pool.size(), [&](int) {
      switch (peak) {
        case Peak::fma: sink = sink + cpu::fma_chains(iterations); break;
        case Peak::vnni: sink = sink + vnni_chains(iterations); break;
        case Peak::bf16_dot: sink = sink + cpu::bf16_dot_chains(iterations); break;
        default: sink = sink + amx_chains(iterations, peak == Peak::amx_int8); break;
      }
    });
  });
  const double per_round = peak == Peak::fma        ? cpu::kFmaChainMacs
                           : peak == Peak::vnni     ? 16.0 * 64
                           : peak == Peak::bf16_dot ? cpu::kBf16DotChainMacs
                           : peak == Peak::amx_bf16 ? 4.0 * 16 * 16 * 32
                                                    : 4.0 * 16 * 16 * 64;
  return double(pool.size()) * iterations * per_round / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string only = argc > 2 ? argv[2] : "";
  std::optional<cpu::Isa> forced;
  if (argc > 3) {
    forced = bench::isa_argument(argv[3]);
    if (!forced) return 2;
  }
  cpu::ThreadPool pool(threads);
  if (cpu::detected_isa() != cpu::Isa::avx512) {
    std::printf("this benchmark's peaks need AVX-512 (this CPU: %s)\n", cpu::isa_name(cpu::detected_isa()));
    return 0;
  }
  const bool vnni = cpu::cpu_has_avx512_vnni(), has_bf16_dot = cpu::cpu_has_avx512_bf16();
  const bool amx = cpu::amx_ready(), amx_int8 = amx && cpu::amx_int8_ready();
  const double bandwidth = read_bandwidth(pool);
  const double fma_peak = peak_gmacs(pool, Peak::fma);
  const double vnni_peak = vnni ? peak_gmacs(pool, Peak::vnni) : 0;
  const double bf16_dot_peak = has_bf16_dot ? peak_gmacs(pool, Peak::bf16_dot) : 0;
  const double amx_bf16_peak = amx ? peak_gmacs(pool, Peak::amx_bf16) : 0;
  const double amx_int8_peak = amx_int8 ? peak_gmacs(pool, Peak::amx_int8) : 0;
  std::printf("%d threads: read bandwidth %.1f GB/s, f32 FMA peak %.1f GMAC/s, VNNI int8 peak %.1f GMAC/s%s\n",
              threads, bandwidth, fma_peak, vnni_peak, vnni ? "" : " (no AVX512-VNNI)");
  if (has_bf16_dot) std::printf("  vdpbf16ps peak %.1f GMAC/s\n", bf16_dot_peak);
  if (amx) std::printf("  AMX peaks: TDPBF16PS %.1f GMAC/s, TDPBSUD %.1f GMAC/s\n", amx_bf16_peak, amx_int8_peak);

  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  struct Variant {
    const char* name;
    QuantSpec spec;
  };
  const Variant variants[] = {{"bf16", {}},
                              {"int8", {QuantKind::int8, 0, false}},
                              {"int8 g32", {QuantKind::int8, 32, false}},
                              {"int4 g32", {QuantKind::int4, 32, false}},
                              {"int4 g32 zp", {QuantKind::int4, 32, true}},
                              {"int4 g128", {QuantKind::int4, 128, false}}};
  std::printf("\nwhole decode step (12 layers + lm_head, weights streamed: from DRAM, or from an L3 larger than the model)\n%-12s %5s %-16s %9s %8s %7s %9s %7s\n",
              "weights", "m", "activations", "ms/step", "GB/s", "of BW", "GMAC/s", "of peak");
  for (const Variant& v : variants) {
    if (!only.empty() && only != v.name) continue;
    std::vector<std::vector<unsigned char>> storage;
    size_t bytes = 0;
    const auto random_bf16 = [&](int n, int k) { return bench::random_bf16(n, k, rng, dist); };
    bench::DecodeStep model(
        [&](int n, int k) {
          const std::vector<unsigned char> raw = random_bf16(n, k);
          if (!v.spec.enabled()) {
            storage.emplace_back(cpu::blocked_bytes(DType::bf16, n, k));
            bytes += storage.back().size();
            return cpu::pack_blocked(cpu::WeightMatrix{DType::bf16, raw.data(), n, k, 0}, storage.back().data());
          }
          const QuantizedMatrix q = quantize(DType::bf16, raw.data(), n, k, 0, v.spec);
          storage.emplace_back(cpu::quantized_bytes(q));
          bytes += storage.back().size();
          return cpu::pack_quantized(q, storage.back().data());
        },
        [&](int ff, int k) {  // gate and up fused, as models load them
          const std::vector<unsigned char> gate = random_bf16(ff, k), up = random_bf16(ff, k);
          if (!v.spec.enabled()) {
            storage.emplace_back(cpu::glu_bytes(DType::bf16, ff, k));
            bytes += storage.back().size();
            return cpu::pack_glu(cpu::WeightMatrix{DType::bf16, gate.data(), ff, k, 0},
                                 cpu::WeightMatrix{DType::bf16, up.data(), ff, k, 0}, storage.back().data());
          }
          const QuantizedMatrix qg = quantize(DType::bf16, gate.data(), ff, k, 0, v.spec);
          const QuantizedMatrix qu = quantize(DType::bf16, up.data(), ff, k, 0, v.spec);
          storage.emplace_back(cpu::quantized_glu_bytes(qg));
          bytes += storage.back().size();
          return cpu::pack_quantized_glu(qg, qu, storage.back().data());
        });
    cpu::WeightMatrix kind;  // what the dispatch reads of the step's matrices: their layout, dtype and codes
    kind.dtype = DType::bf16;
    kind.layout = v.spec.enabled() ? cpu::WeightLayout::quantized : cpu::WeightLayout::blocked;
    if (v.spec.enabled()) kind.quant.bits = v.spec.kind == QuantKind::int4 ? 4 : 8;
    for (int m : {1, 8, 16, 32, 128}) {
      // The automatic path, and on a CPU with AMX the vector one beside it where the tiles take the product.
      const cpu::Isa automatic = cpu::isa_for(cpu::Isa::automatic).value();
      std::vector<cpu::Isa> isas{forced.value_or(automatic)};
      const cpu::ProductPath first = cpu::product_path(isas[0], m, kind);
      if (!forced && (first == cpu::ProductPath::bf16_tiles || first == cpu::ProductPath::int8_tiles))
        isas.push_back(cpu::Isa::avx512_bf16);
      for (const cpu::Isa isa : isas) {
        const cpu::ProductPath path = cpu::product_path(isa, m, kind);
        const char* how = cpu::product_path_name(path);
        // The peak of the instructions this path multiplies with, measured above.
        double peak = fma_peak;
        switch (path) {
          case cpu::ProductPath::bf16_tiles: peak = amx_bf16_peak; break;
          case cpu::ProductPath::int8_tiles: peak = amx_int8_peak; break;
          case cpu::ProductPath::int8_dot: peak = vnni_peak; break;
          case cpu::ProductPath::int8_pairs: peak = 0; break;  // no vpmaddubsw peak measured (CPUs without VNNI)
          case cpu::ProductPath::bf16_dot: peak = bf16_dot_peak; break;
          case cpu::ProductPath::f32_fma:
          case cpu::ProductPath::bf16_fma: break;
        }
        auto step = [&] { model.run(m, pool, cpu::GemmPath{isa, cpu::Kernel::automatic}); };
        const double s = best_of(step);
        const double macs = bench::DecodeStep::macs(m);
        const double gbs = double(bytes) / s / 1e9, gmacs = macs / s / 1e9;
        std::printf("%-12s %5d %-16s %9.2f %8.1f %6.0f%% %9.1f", v.name, m, how, s * 1e3, gbs, 100 * gbs / bandwidth,
                    gmacs);
        if (peak > 0) std::printf(" %6.0f%%\n", 100 * gmacs / peak);
        else std::printf("       -\n");
      }
    }
  }
}
