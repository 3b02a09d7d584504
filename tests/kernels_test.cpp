// Parity of every CPU kernel against its double-precision reference, on random inputs of several shapes.
#include <catch2/catch.hpp>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <atomic>

#include "core/kv_rows.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/kernels.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "executors/cpu/reference_kernels.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

using test::random_vector;

// Weights stored in `dtype`, and their exact f32 values (what a reference must multiply by).
struct StoredWeights {
  std::vector<unsigned char> bytes;
  std::vector<float> exact;
};
StoredWeights store_as(DType dtype, const std::vector<float>& values) {
  StoredWeights w{std::vector<unsigned char>(values.size() * dtype_size(dtype)), std::vector<float>(values.size())};
  convert_from_f32(dtype, values.data(), w.bytes.data(), values.size());
  convert_to_f32(dtype, w.bytes.data(), w.exact.data(), values.size());
  return w;
}

// Every instruction set this CPU runs: portable, then avx2 and avx512 where available.
std::vector<cpu::Isa> runnable_isas() {
  std::vector<cpu::Isa> isas{cpu::Isa::portable};
  if (cpu::detected_isa() == cpu::Isa::avx2 || cpu::detected_isa() == cpu::Isa::avx512) isas.push_back(cpu::Isa::avx2);
  if (cpu::detected_isa() == cpu::Isa::avx512) isas.push_back(cpu::Isa::avx512);
  return isas;
}

void require_close(const std::vector<float>& a, const std::vector<float>& b, float rel = 1e-5f) {
  REQUIRE(a.size() == b.size());
  float max_ref = 0;
  for (float x : b) max_ref = std::max(max_ref, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("index " << i << ": " << a[i] << " vs " << b[i]);
    REQUIRE(std::abs(a[i] - b[i]) <= rel * std::max(1.0f, max_ref));
  }
}

}  // namespace

TEST_CASE("gemm_nt matches the reference for every dtype - shape - ISA - kernel and thread count", "[kernels]") {
  std::mt19937 rng(1);
  std::vector<cpu::GemmPath> paths{{cpu::Isa::portable, cpu::Kernel::rows}};
  for (cpu::Isa isa : runnable_isas()) {
    if (isa == cpu::Isa::portable) continue;
    paths.push_back({isa, cpu::Kernel::rows});
    paths.push_back({isa, cpu::Kernel::packed});
  }
  if (cpu::have_blas()) paths.push_back({cpu::Isa::automatic, cpu::Kernel::blas});
  paths.push_back({});
  for (int threads : {1, 3}) {
    cpu::ThreadPool pool(threads);
    for (auto [m, n, k] : {std::tuple{1, 1, 1}, {3, 7, 5}, {16, 64, 172}, {5, 512, 64}, {130, 37, 96}, {2, 9, 8},
                           {40, 100, 700}, {9, 30, 1100}, {33, 49, 17}}) {
      auto x = random_vector(size_t(m) * k, rng), w32 = random_vector(size_t(n) * k, rng),
           bias = random_vector(n, rng);
      for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        const StoredWeights w = store_as(dtype, w32);
        std::vector<float> ref(size_t(m) * n);
        cpu::reference::matmul_nt(x.data(), w.exact.data(), ref.data(), m, n, k);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += bias[i % n];
        cpu::WeightMatrix wm{dtype, w.bytes.data(), n, k, 0};
        for (const cpu::GemmPath& path : paths) {
          INFO("m=" << m << " n=" << n << " k=" << k << " dtype=" << dtype_name(dtype) << " isa="
                    << cpu::isa_name(path.isa) << " kernel=" << cpu::kernel_name(path.kernel) << " threads=" << threads);
          std::vector<float> y(size_t(m) * n, -1.0f);
          cpu::gemm_nt(x.data(), wm, bias.data(), y.data(), m, pool, path);
          require_close(y, ref, 2e-5f * std::max(1.0f, std::sqrt(k / 100.0f)));
        }
      }
    }
  }
}

// Blocked weights: every ISA, dtype, a tail block, m across the register-block sizes (1..12 and their splits) and
// x chunk boundaries (k = 1100: at most 119 rows per chunk, so 130 rows go as 65 + 65), bias or not.
TEST_CASE("gemm_nt over blocked weights matches the reference - a row gets the same bits at any row count", "[kernels]") {
  std::mt19937 rng(3);
  const std::vector<cpu::Isa> isas = runnable_isas();
  for (int threads : {1, 3}) {
    cpu::ThreadPool pool(threads);
    for (auto [m, n, k] : {std::tuple{1, 1, 1}, {3, 7, 5}, {12, 64, 172}, {13, 96, 64}, {32, 100, 33}, {7, 33, 8},
                           {40, 160, 700}, {130, 37, 96}, {130, 30, 1100}}) {
      auto x = random_vector(size_t(m) * k, rng), w32 = random_vector(size_t(n) * k, rng),
           bias = random_vector(n, rng);
      for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        const StoredWeights w = store_as(dtype, w32);
        const cpu::WeightMatrix row_major{dtype, w.bytes.data(), n, k, 0};
        std::vector<unsigned char> blocked_storage(cpu::blocked_bytes(dtype, n, k));
        const cpu::WeightMatrix blocked = cpu::pack_blocked(row_major, blocked_storage.data());
        REQUIRE(blocked.layout == cpu::WeightLayout::blocked);
        std::vector<float> row(k);
        for (int r : {0, n / 2, n - 1}) {
          cpu::weight_row_to_f32(blocked, r, row.data());
          REQUIRE(std::equal(row.begin(), row.end(), w.exact.begin() + size_t(r) * k));
        }
        std::vector<float> untouched(n, -3.0f);  // no rows: nothing is written
        cpu::gemm_nt(x.data(), blocked, bias.data(), untouched.data(), 0, pool);
        REQUIRE(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == -3.0f; }));
        for (bool with_bias : {false, true}) {
          std::vector<float> ref(size_t(m) * n);
          cpu::reference::matmul_nt(x.data(), w.exact.data(), ref.data(), m, n, k);
          if (with_bias)
            for (size_t i = 0; i < ref.size(); ++i) ref[i] += bias[i % n];
          for (cpu::Isa isa : isas) {
            INFO("m=" << m << " n=" << n << " k=" << k << " dtype=" << dtype_name(dtype) << " isa="
                      << cpu::isa_name(isa) << " threads=" << threads << " bias=" << with_bias);
            std::vector<float> y(size_t(m) * n, -1.0f);
            cpu::gemm_nt(x.data(), blocked, with_bias ? bias.data() : nullptr, y.data(), m, pool, {isa});
            require_close(y, ref, 2e-5f * std::max(1.0f, std::sqrt(k / 100.0f)));
            // A row's outputs are the same bits at any row count (AVX2 takes one or two rows in a pass over both
            // halves of a block, more in two passes).
            for (int r0 = 0; r0 < std::min(m, 5); r0 += 2) {
              const int rows = std::min(2, m - r0);
              for (int count : {1, rows}) {
                std::vector<float> alone(size_t(count) * n);
                cpu::gemm_nt(x.data() + size_t(r0) * k, blocked, with_bias ? bias.data() : nullptr, alone.data(), count,
                             pool, {isa});
                REQUIRE(std::memcmp(alone.data(), y.data() + size_t(r0) * n, sizeof(float) * alone.size()) == 0);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("gemm_nt_glu equals silu(x G^T) * (x U^T) for every ISA and dtype - the same bits at any row count", "[kernels]") {
  std::mt19937 rng(9);
  const std::vector<cpu::Isa> isas = runnable_isas();
  cpu::ThreadPool pool(3);
  for (auto [m, ff, k] : {std::tuple{1, 1, 1}, {3, 7, 5}, {12, 16, 64}, {13, 33, 40}, {32, 100, 96}, {70, 64, 1100}}) {
    auto x = random_vector(size_t(m) * k, rng), g32 = random_vector(size_t(ff) * k, rng),
         u32 = random_vector(size_t(ff) * k, rng);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const StoredWeights g = store_as(dtype, g32), u = store_as(dtype, u32);
      std::vector<float> ref(size_t(m) * ff), up(size_t(m) * ff);
      cpu::reference::matmul_nt(x.data(), g.exact.data(), ref.data(), m, ff, k);
      cpu::reference::matmul_nt(x.data(), u.exact.data(), up.data(), m, ff, k);
      cpu::reference::silu_mul(ref.data(), up.data(), m * ff);
      std::vector<unsigned char> fused(cpu::glu_bytes(dtype, ff, k));
      const cpu::WeightMatrix w = cpu::pack_glu(cpu::WeightMatrix{dtype, g.bytes.data(), ff, k, 0},
                                                cpu::WeightMatrix{dtype, u.bytes.data(), ff, k, 0}, fused.data());
      for (cpu::Isa isa : isas) {
        INFO("m=" << m << " ff=" << ff << " k=" << k << " dtype=" << dtype_name(dtype) << " isa=" << cpu::isa_name(isa));
        std::vector<float> y(size_t(m) * ff, -1.0f);
        cpu::gemm_nt_glu(x.data(), w, ff, y.data(), m, pool, isa);
        require_close(y, ref, 4e-5f * std::max(1.0f, std::sqrt(k / 100.0f)));
        for (int r0 = 0; r0 < std::min(m, 5); r0 += 2) {  // the same bits at any row count
          const int rows = std::min(2, m - r0);
          for (int count : {1, rows}) {
            std::vector<float> alone(size_t(count) * ff);
            cpu::gemm_nt_glu(x.data() + size_t(r0) * k, w, ff, alone.data(), count, pool, isa);
            REQUIRE(std::memcmp(alone.data(), y.data() + size_t(r0) * ff, sizeof(float) * alone.size()) == 0);
          }
        }
      }
    }
  }
}

// groups[].cpu_isa: avx512_bf16 rounds x to bf16 for bf16 weights: against the reference with x rounded the same
// way it is within f32 summation error; against the unrounded reference within the rounding's bound, 2^-9 of
// sum |x_t| |w_t| per output. f32 and f16 weights take the avx512 kernel, bit for bit.
TEST_CASE("gemm_nt and gemm_nt_glu with avx512_bf16 on bf16 weights equal the reference with x rounded to bf16 - "
          "other dtypes equal avx512", "[kernels][bf16]") {
  if (!cpu::cpu_has_avx512_bf16()) {
    WARN("skipped: this CPU has no AVX512-BF16");
    return;
  }
  std::mt19937 rng(17);
  cpu::ThreadPool pool(3);
  auto abs_of = [](std::vector<float> v) {
    for (float& x : v) x = std::abs(x);
    return v;
  };
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, {3, 7, 5}, {12, 64, 172}, {13, 96, 64}, {32, 100, 33}, {40, 160, 700},
                         {130, 30, 1100}}) {
    auto x = random_vector(size_t(m) * k, rng), w32 = random_vector(size_t(n) * k, rng), bias = random_vector(n, rng);
    const std::vector<float> x_rounded = store_as(DType::bf16, x).exact;
    for (DType dtype : {DType::bf16, DType::f32, DType::f16}) {
      INFO("m=" << m << " n=" << n << " k=" << k << " dtype=" << dtype_name(dtype));
      const StoredWeights w = store_as(dtype, w32);
      std::vector<unsigned char> storage(cpu::blocked_bytes(dtype, n, k));
      const cpu::WeightMatrix blocked = cpu::pack_blocked(cpu::WeightMatrix{dtype, w.bytes.data(), n, k, 0}, storage.data());
      std::vector<float> y(size_t(m) * n), y512(size_t(m) * n);
      cpu::gemm_nt(x.data(), blocked, bias.data(), y.data(), m, pool, {cpu::Isa::avx512_bf16});
      cpu::gemm_nt(x.data(), blocked, bias.data(), y512.data(), m, pool, {cpu::Isa::avx512});
      if (dtype != DType::bf16) {
        CHECK(y == y512);
        continue;
      }
      std::vector<float> ref(size_t(m) * n), ref_rounded(size_t(m) * n), bound(size_t(m) * n);
      cpu::reference::matmul_nt(x.data(), w.exact.data(), ref.data(), m, n, k);
      cpu::reference::matmul_nt(x_rounded.data(), w.exact.data(), ref_rounded.data(), m, n, k);
      cpu::reference::matmul_nt(abs_of(x).data(), abs_of(w.exact).data(), bound.data(), m, n, k);
      for (size_t i = 0; i < ref.size(); ++i) {
        ref[i] += bias[i % n];
        ref_rounded[i] += bias[i % n];
      }
      require_close(y, ref_rounded, 2e-5f * std::max(1.0f, std::sqrt(k / 100.0f)));
      for (size_t i = 0; i < y.size(); ++i) {
        INFO("index " << i << ": " << y[i] << " vs " << ref[i]);
        REQUIRE(std::abs(y[i] - ref[i]) <= std::ldexp(bound[i], -9) + 1e-4f * (1.0f + std::abs(ref[i])));
      }
    }
    // The fused gate/up product.
    const int ff = n;
    auto u32 = random_vector(size_t(ff) * k, rng);
    const StoredWeights g = store_as(DType::bf16, w32), u = store_as(DType::bf16, u32);
    std::vector<unsigned char> fused(cpu::glu_bytes(DType::bf16, ff, k));
    const cpu::WeightMatrix glu = cpu::pack_glu(cpu::WeightMatrix{DType::bf16, g.bytes.data(), ff, k, 0},
                                                cpu::WeightMatrix{DType::bf16, u.bytes.data(), ff, k, 0}, fused.data());
    std::vector<float> gate(size_t(m) * ff), up(size_t(m) * ff), y(size_t(m) * ff);
    cpu::reference::matmul_nt(x_rounded.data(), g.exact.data(), gate.data(), m, ff, k);
    cpu::reference::matmul_nt(x_rounded.data(), u.exact.data(), up.data(), m, ff, k);
    cpu::reference::silu_mul(gate.data(), up.data(), m * ff);
    cpu::gemm_nt_glu(x.data(), glu, ff, y.data(), m, pool, cpu::Isa::avx512_bf16);
    require_close(y, gate, 4e-5f * std::max(1.0f, std::sqrt(k / 100.0f)));
  }
}

// What the FMA kernels multiply under amx below kAmxMinRows rows where vdpbf16ps is slow: x rounded as to_bf16_pairs
// rounds it (to nearest even), back in f32.
TEST_CASE("round_to_bf16_avx512 rounds to nearest even as f32_to_bf16 does - ties, tails", "[kernels][bf16]") {
  if (!cpu::cpu_has_avx512_bf16()) {
    WARN("skipped: this CPU has no AVX512-BF16");
    return;
  }
  std::mt19937 rng(23);
  for (const int64_t n : {0, 1, 15, 16, 17, 100}) {
    std::vector<float> x = random_vector(size_t(n), rng);
    // Exact ties: the low half 0x8000 rounds to the even neighbour, up or down.
    if (n > 3) {
      x[0] = std::bit_cast<float>(0x3F808000u);
      x[1] = std::bit_cast<float>(0x3F818000u);
      x[2] = std::bit_cast<float>(0xBF80FFFFu);
    }
    std::vector<float> out(size_t(n), -1.0f);
    cpu::round_to_bf16_avx512(x.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      INFO("n=" << n << " i=" << i << " x=" << x[size_t(i)]);
      CHECK(std::bit_cast<uint32_t>(out[size_t(i)]) ==
            std::bit_cast<uint32_t>(bf16_to_f32(f32_to_bf16(x[size_t(i)]))));
    }
  }
}

// Each pool thread runs its own sgemm on a panel: the BLAS library must tolerate concurrent callers (a serial
// OpenBLAS built without locking shares its scratch buffers between them and returns garbage now and then).
TEST_CASE("the blas path stays exact under concurrent callers", "[kernels]") {
  if (!cpu::have_blas()) return;
  std::mt19937 rng(11);
  const int m = 96, n = 1024, k = 256;
  auto x = random_vector(size_t(m) * k, rng), w = random_vector(size_t(n) * k, rng);
  std::vector<unsigned char> stored(w.size() * dtype_size(DType::bf16));
  convert_from_f32(DType::bf16, w.data(), stored.data(), w.size());
  const cpu::WeightMatrix wm{DType::bf16, stored.data(), n, k, 0};
  cpu::ThreadPool single(1), pool(4);
  std::vector<float> expected(size_t(m) * n), y(size_t(m) * n);
  cpu::gemm_nt(x.data(), wm, nullptr, expected.data(), m, single, {cpu::Isa::automatic, cpu::Kernel::blas});
  // Split over the pool, a column's sum may differ in its last bits from the whole-matrix call (OpenBLAS picks its
  // blocking by shape: seen on a Zen 3 EPYC), but the same split gives the same bits every time; callers racing on
  // shared scratch buffers (the serial build) give different, wrong values.
  std::vector<float> first;
  for (int round = 0; round < 40; ++round) {
    std::fill(y.begin(), y.end(), 0.0f);
    cpu::gemm_nt(x.data(), wm, nullptr, y.data(), m, pool, {cpu::Isa::automatic, cpu::Kernel::blas});
    INFO("round " << round);
    if (round == 0) {
      require_close(y, expected, 1e-5f);
      first = y;
    }
    REQUIRE(y == first);
  }
}

TEST_CASE("gemm_nt_multi equals one gemm_nt per output", "[kernels]") {
  std::mt19937 rng(7);
  cpu::ThreadPool pool(3);
  const int k = 96;
  const int widths[] = {64, 16, 200};  // q, k, v-like outputs of different widths; the second has a bias
  std::vector<std::vector<unsigned char>> stored;
  std::vector<cpu::WeightMatrix> weights;
  for (int n : widths) {
    auto w = random_vector(size_t(n) * k, rng);
    stored.emplace_back(w.size() * 2);
    convert_from_f32(DType::bf16, w.data(), stored.back().data(), w.size());
  }
  for (int o = 0; o < 3; ++o) weights.push_back({DType::bf16, stored[o].data(), widths[o], k, 0});
  const auto bias = random_vector(widths[1], rng);
  for (int m : {1, 5, 16, 40}) {
    for (cpu::Kernel kernel : {cpu::Kernel::automatic, cpu::Kernel::rows, cpu::Kernel::packed}) {
      INFO("m=" << m << " kernel=" << cpu::kernel_name(kernel));
      const auto x = random_vector(size_t(m) * k, rng);
      std::vector<std::vector<float>> multi(3), single(3);
      cpu::GemmOutput outs[3];
      for (int o = 0; o < 3; ++o) {
        multi[o].assign(size_t(m) * widths[o], -1.0f);
        single[o].assign(size_t(m) * widths[o], -2.0f);
        outs[o] = {&weights[o], o == 1 ? bias.data() : nullptr, multi[o].data()};
        cpu::gemm_nt(x.data(), weights[o], outs[o].bias, single[o].data(), m, pool, {cpu::Isa::automatic, kernel});
      }
      cpu::gemm_nt_multi(x.data(), outs, 3, m, pool, {cpu::Isa::automatic, kernel});
      for (int o = 0; o < 3; ++o) REQUIRE(multi[o] == single[o]);
    }
  }
}

TEST_CASE("gemm_nt reads a strided slice of a weight matrix", "[kernels]") {
  std::mt19937 rng(5);
  const int m = 3, n = 30, k = 16, stride = 40;
  auto x = random_vector(size_t(m) * k, rng), w = random_vector(size_t(n) * stride, rng);
  std::vector<float> dense(size_t(n) * k), ref(size_t(m) * n), y(size_t(m) * n);
  for (int r = 0; r < n; ++r) std::copy_n(w.data() + r * stride + 8, k, dense.data() + r * k);
  cpu::reference::matmul_nt(x.data(), dense.data(), ref.data(), m, n, k);
  cpu::ThreadPool pool(2);
  for (cpu::Kernel kernel : {cpu::Kernel::rows, cpu::Kernel::packed}) {
    INFO("kernel=" << cpu::kernel_name(kernel));
    std::fill(y.begin(), y.end(), 0.0f);
    cpu::gemm_nt(x.data(), cpu::WeightMatrix{DType::f32, w.data() + 8, n, k, stride}, nullptr, y.data(), m, pool,
                 {cpu::Isa::automatic, kernel});
    require_close(y, ref);
  }
}

TEST_CASE("the thread pool runs every task exactly once", "[kernels]") {
  cpu::ThreadPool pool(4);
  for (int n : {0, 1, 3, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    for (int round = 0; round < 20; ++round) pool.parallel_for(n, [&](int i) { hits[i].fetch_add(1); });
    for (int i = 0; i < n; ++i) REQUIRE(hits[i].load() == 20);
  }
}

TEST_CASE("dtype conversions round to nearest even and keep specials", "[kernels]") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_f32(f32_to_bf16(3.140625f)) == 3.140625f);
  CHECK(f32_to_bf16(1.00390625f) == 0x3f80);  // exactly halfway: to even
  CHECK(f16_to_f32(f32_to_f16(65504.0f)) == 65504.0f);
  CHECK(f32_to_f16(1e6f) == 0x7c00);           // overflow to inf
  CHECK(f16_to_f32(f32_to_f16(5.960464477539063e-08f)) == 5.960464477539063e-08f);  // smallest subnormal
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (int i = 0; i < 1000; ++i) {
    const float v = dist(rng);
    CHECK(std::abs(f16_to_f32(f32_to_f16(v)) - v) <= std::abs(v) * 0.0005f);
    CHECK(std::abs(bf16_to_f32(f32_to_bf16(v)) - v) <= std::abs(v) * 0.004f);
  }
}

TEST_CASE("int8 KV rows: codes of max |x| / 127, the largest at +-127, each value within half a step - a zero row "
          "is zeros, a NaN or infinite one NaN - i8 conversions round and saturate", "[kernels][kv]") {
  CHECK(f32_to_i8(2.5f) == 2);  // halfway: to even
  CHECK(f32_to_i8(-3.5f) == -4);
  CHECK(f32_to_i8(300.0f) == 127);
  CHECK(f32_to_i8(-1e9f) == -128);
  CHECK(f32_to_i8(std::nanf("")) == 0);
  CHECK(parse_kv_dtype("int8") == DType::i8);
  CHECK(parse_kv_dtype("bfloat16") == DType::bf16);
  CHECK_FALSE(parse_dtype("int8").has_value());  // never a weight dtype
  constexpr int hd = 40, bs = 3;
  std::vector<unsigned char> region(size_t(kv_head_stride(DType::i8, bs, hd)), 0xee);
  CHECK(region.size() == size_t(bs * hd + 4 * bs));
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> x(hd), back(hd);
  for (int slot = 0; slot < bs; ++slot) {
    for (float& e : x) e = dist(rng) * float(slot + 1);
    x[7] = -4.0f * float(slot + 1);  // the largest magnitude, negative
    store_kv_row(DType::i8, x.data(), hd, bs, region.data(), slot);
    const float scale = kv_row_scale(region.data(), bs, hd, slot);
    CHECK(scale == 4.0f * float(slot + 1) / 127.0f);
    CHECK(static_cast<int8_t>(region[size_t(slot) * hd + 7]) == -127);
    load_kv_row(DType::i8, region.data(), hd, bs, slot, back.data());
    for (int d = 0; d < hd; ++d) REQUIRE(std::abs(back[d] - x[d]) <= scale * 0.5f * 1.0001f);
  }
  std::fill(x.begin(), x.end(), 0.0f);
  store_kv_row(DType::i8, x.data(), hd, bs, region.data(), 1);
  CHECK(kv_row_scale(region.data(), bs, hd, 1) == 0.0f);
  load_kv_row(DType::i8, region.data(), hd, bs, 1, back.data());
  CHECK(std::all_of(back.begin(), back.end(), [](float e) { return e == 0.0f; }));
  // A row holding a NaN or an infinity reads back as NaN (what attention over it then gives), not as numbers.
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::fill(x.begin(), x.end(), 1.0f);
    x[5] = bad;
    store_kv_row(DType::i8, x.data(), hd, bs, region.data(), 2);
    load_kv_row(DType::i8, region.data(), hd, bs, 2, back.data());
    CHECK(std::all_of(back.begin(), back.end(), [](float e) { return std::isnan(e); }));
  }
  // The float dtypes: the rows are the dtype's conversion, nothing after them.
  CHECK(kv_head_stride(DType::bf16, bs, hd) == bs * hd);
  std::vector<unsigned char> halves(size_t(bs * hd * 2));
  x[3] = 1.00390625f;
  store_kv_row(DType::bf16, x.data(), hd, bs, halves.data(), 2);
  load_kv_row(DType::bf16, halves.data(), hd, bs, 2, back.data());
  CHECK(back[3] == 1.0f);
}

TEST_CASE("rms_norm - rope - silu_mul - gelu_tanh_mul and softcap match the reference", "[kernels]") {
  std::mt19937 rng(2);
  for (int dim : {8, 64, 130}) {
    auto x = random_vector(size_t(3) * dim, rng), w = random_vector(dim, rng);
    std::vector<float> y(x.size()), ref(x.size());
    cpu::rms_norm(x.data(), w.data(), y.data(), 3, dim, 1e-5f);
    cpu::reference::rms_norm(x.data(), w.data(), ref.data(), 3, dim, 1e-5f);
    require_close(y, ref);
  }
  // Whole heads, and partial rotary (the first rotary_dim elements rotate, the rest pass through unchanged).
  // cos and sin scaled (an attention factor) or not.
  for (auto [head_dim, rotary_dim] : {std::pair{2, 2}, {8, 8}, {64, 64}, {128, 128}, {128, 96}, {64, 16}, {8, 2}}) {
    for (int pos : {0, 1, 17, 511}) {
      const float scale = pos == 17 ? 1.19f : 1.0f;
      auto x = random_vector(size_t(4) * head_dim, rng), ref = x;
      const auto before = x;
      std::vector<float> inv_freq(rotary_dim / 2);
      cpu::rope_inv_freq(rotary_dim, 10000.0f, inv_freq.data());
      cpu::rope_rotate_half(x.data(), 4, head_dim, rotary_dim, pos, inv_freq.data(), scale);
      cpu::reference::rope_rotate_half(ref.data(), 4, head_dim, rotary_dim, pos, 10000.0f, scale);
      require_close(x, ref, 1e-4f);
      for (int h = 0; h < 4; ++h)
        for (int i = rotary_dim; i < head_dim; ++i) REQUIRE(x[size_t(h * head_dim + i)] == before[size_t(h * head_dim + i)]);
    }
  }
  auto g = random_vector(100, rng, 4.0f), u = random_vector(100, rng), gref = g;
  cpu::silu_mul(g.data(), u.data(), 100);
  cpu::reference::silu_mul(gref.data(), u.data(), 100);
  require_close(g, gref);
  // GELU over [-12, 12] (both tails, where tanh saturates), and the extremes.
  std::vector<float> x, up;
  for (int i = -1200; i <= 1200; ++i) x.push_back(float(i) / 100.0f);
  for (float v : {-100.0f, 100.0f, 0.0f, -0.0f}) x.push_back(v);
  up = random_vector(x.size(), rng);
  auto xref = x;
  cpu::gelu_tanh_mul(x.data(), up.data(), int(x.size()));
  cpu::reference::gelu_tanh_mul(xref.data(), up.data(), int(xref.size()));
  require_close(x, xref);
  // Gemma 2's cap of logits (30) over [-120, 120]: cap tanh(x / cap) within 1e-6 of the cap.
  std::vector<float> logits, capped;
  for (int i = -1200; i <= 1200; ++i) logits.push_back(float(i) / 10.0f);
  capped = logits;
  cpu::softcap_inplace(capped.data(), 30.0f, capped.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    INFO("x " << logits[i]);
    REQUIRE(std::abs(capped[i] - 30.0 * std::tanh(double(logits[i]) / 30.0)) <= 3e-5);
  }
}

TEST_CASE("paged attention over scattered blocks matches contiguous reference attention in every KV dtype (int8 with row scales - bf16 read in pairs) - a query alone gives its bits in a chunk", "[kernels]") {
  std::mt19937 rng(3);
  struct Shape {
    int n_heads, n_kv_heads, head_dim, block_size, start_pos, n_tokens, sliding_window = 0;
    float softcap = 0.0f;  // Gemma 2's cap of the scores
  };
  for (Shape s : {Shape{8, 4, 8, 16, 0, 1}, Shape{8, 4, 8, 16, 0, 37}, Shape{4, 4, 64, 4, 9, 1},
                  Shape{6, 2, 16, 8, 20, 5}, Shape{2, 1, 128, 1, 3, 3}, Shape{2, 2, 64, 16, 40, 50},
                  Shape{3, 1, 24, 16, 100, 1}, Shape{2, 1, 32, 16, 0, 70, 7}, Shape{2, 2, 16, 4, 30, 20, 9},
                  Shape{2, 2, 16, 16, 60, 1, 5}, Shape{1, 1, 8, 16, 0, 40, 1}, Shape{4, 2, 128, 16, 203, 1},
                  Shape{2, 2, 64, 16, 130, 1, 50}, Shape{2, 1, 80, 32, 66, 1},
                  // prefills of 17 and 33 queries
                  Shape{4, 2, 64, 16, 5, 17}, Shape{2, 2, 16, 8, 3, 33, 6},
                  // head_dim 8 decode over full 16-key blocks and a partial one with an odd key count
                  Shape{8, 4, 8, 16, 40, 1}, Shape{4, 2, 8, 16, 36, 1}, Shape{2, 2, 8, 32, 70, 1, 45},
                  // decode over several 256-key softmax spans: whole, ending mid-block, starting mid-span (window)
                  Shape{8, 4, 8, 16, 511, 1}, Shape{4, 2, 8, 16, 600, 1}, Shape{2, 2, 64, 16, 700, 1, 333},
                  Shape{2, 1, 24, 5, 530, 1},
                  // bf16 rows read in pairs (head_dim a multiple of 16 / 32): head_dim 96 (no fixed-size kernel) in a
                  // prefill and a decode over two spans, 32 (one 32-element run) in a prefill
                  Shape{2, 1, 96, 16, 40, 21}, Shape{3, 3, 96, 16, 300, 1}, Shape{2, 2, 32, 16, 10, 9},
                  // capped scores: a prefill, a windowed one, decodes over one span and several
                  Shape{4, 2, 64, 16, 5, 17, 0, 0.7f}, Shape{2, 2, 16, 8, 3, 33, 6, 0.5f},
                  Shape{4, 2, 128, 16, 203, 1, 0, 1.0f}, Shape{2, 2, 64, 16, 700, 1, 333, 0.8f}}) {
    INFO("heads " << s.n_heads << "/" << s.n_kv_heads << " head_dim " << s.head_dim << " block " << s.block_size
                  << " start " << s.start_pos << " tokens " << s.n_tokens << " window " << s.sliding_window
                  << " softcap " << s.softcap);
    const int n_ctx = s.start_pos + s.n_tokens, kv_row = s.n_kv_heads * s.head_dim, q_row = s.n_heads * s.head_dim;
    const int n_blocks_used = (n_ctx + s.block_size - 1) / s.block_size, pool_blocks = n_blocks_used * 2 + 3;
    // Blocks are scattered: sequence block i lives in pool block (2*i + 1) in reverse order.
    std::vector<uint32_t> table(n_blocks_used);
    for (int i = 0; i < n_blocks_used; ++i) table[i] = uint32_t(pool_blocks - 1 - 2 * i);
    auto k = random_vector(size_t(n_ctx) * kv_row, rng), v = random_vector(size_t(n_ctx) * kv_row, rng);
    auto q = random_vector(size_t(s.n_tokens) * q_row, rng);
    for (DType kv_dtype : {DType::f32, DType::bf16, DType::f16, DType::i8}) {
      INFO("kv dtype " << dtype_name(kv_dtype));
      // KvCache's layout: [blocks, 2 (k|v), kv_heads, head region] (core/kv_rows.hpp: block_size rows of head_dim,
      // then for i8 the rows' scales); the reference gets K and V as the cache holds them.
      const int64_t head_stride = kv_head_stride(kv_dtype, s.block_size, s.head_dim);
      const int64_t block_stride = 2 * s.n_kv_heads * head_stride;
      const size_t esize = dtype_size(kv_dtype);
      std::vector<unsigned char> pool(size_t(pool_blocks) * block_stride * esize, 0);
      std::vector<float> k_exact(k.size()), v_exact(v.size());
      for (int j = 0; j < n_ctx; ++j) {
        for (int g = 0; g < s.n_kv_heads; ++g) {
          unsigned char* k_head = pool.data() + (table[j / s.block_size] * block_stride + g * head_stride) * esize;
          unsigned char* v_head = k_head + s.n_kv_heads * head_stride * esize;
          const int slot = j % s.block_size;
          const size_t src = size_t(j) * kv_row + g * s.head_dim;
          store_kv_row(kv_dtype, k.data() + src, s.head_dim, s.block_size, k_head, slot);
          store_kv_row(kv_dtype, v.data() + src, s.head_dim, s.block_size, v_head, slot);
          load_kv_row(kv_dtype, k_head, s.head_dim, s.block_size, slot, k_exact.data() + src);
          load_kv_row(kv_dtype, v_head, s.head_dim, s.block_size, slot, v_exact.data() + src);
        }
      }
      std::vector<float> out(q.size()), ref(q.size());
      cpu::PagedAttentionParams p;
      p.q = q.data();
      p.out = out.data();
      p.n_tokens = s.n_tokens;
      p.start_pos = s.start_pos;
      p.n_heads = s.n_heads;
      p.n_kv_heads = s.n_kv_heads;
      p.head_dim = s.head_dim;
      p.block_size = s.block_size;
      p.block_table = table.data();
      p.k_base = pool.data();
      p.v_base = pool.data() + s.n_kv_heads * head_stride * esize;
      p.kv_dtype = kv_dtype;
      p.block_stride = block_stride;
      p.head_stride = head_stride;
      p.sliding_window = s.sliding_window;
      p.logit_softcap = s.softcap;
      cpu::reference::attention(q.data(), k_exact.data(), v_exact.data(), ref.data(), s.n_tokens, s.start_pos,
                                s.n_heads, s.n_kv_heads, s.head_dim, s.sliding_window, s.softcap);
      // Every instance this CPU can run (the others fall back to one it can).
      for (cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512}) {
        INFO("isa " << cpu::isa_name(isa));
        std::fill(out.begin(), out.end(), 0.0f);
        cpu::paged_attention(p, isa);
        require_close(out, ref, 1e-5f);
        // Batch invariance: each query alone (a decode at its position) gives the bits it gets in the chunk.
        std::vector<float> alone(size_t(q_row), 0.0f);
        for (int t = 0; t < s.n_tokens; ++t) {
          cpu::PagedAttentionParams one = p;
          one.q = q.data() + size_t(t) * q_row;
          one.out = alone.data();
          one.n_tokens = 1;
          one.start_pos = s.start_pos + t;
          cpu::paged_attention(one, isa);
          REQUIRE(std::memcmp(alone.data(), out.data() + size_t(t) * q_row, sizeof(float) * q_row) == 0);
        }
        // A task's share of the heads (the model splits heads over tasks): only [head_begin, head_end) is written.
        if (s.n_heads > 1) {
          cpu::PagedAttentionParams part = p;
          part.head_begin = 1;
          part.head_end = s.n_heads;
          std::fill(out.begin(), out.end(), 0.0f);
          cpu::paged_attention(part, isa);
          for (int t = 0; t < s.n_tokens; ++t) {
            for (int d = 0; d < s.head_dim; ++d) REQUIRE(out[size_t(t) * q_row + d] == 0.0f);
            std::copy_n(ref.begin() + size_t(t) * q_row, s.head_dim, out.begin() + size_t(t) * q_row);
          }
          require_close(out, ref, 1e-5f);
        }
      }
    }
  }
}

TEST_CASE("decode attention tasks take whole GQA groups and leave a task for every thread", "[kernels]") {
  CHECK(cpu::decode_heads_per_task(12, 12, 32, 2) == 12);  // 32 tasks of all heads for 2 threads
  CHECK(cpu::decode_heads_per_task(12, 12, 1, 2) == 6);    // one sequence: a task per thread
  CHECK(cpu::decode_heads_per_task(32, 8, 1, 2) == 16);    // groups of 4 query heads per KV head stay together
  CHECK(cpu::decode_heads_per_task(32, 8, 3, 16) == 4);    // whole groups of 4 heads: 24 tasks for 16 threads
  CHECK(cpu::decode_heads_per_task(12, 12, 3, 2) == 6);    // 3 sequences: 6 tasks, not 3 on 2 threads
  CHECK(cpu::decode_heads_per_task(12, 12, 9, 16) == 2);   // 9 sequences on 16 threads: 54 tasks, not 18
  CHECK(cpu::decode_heads_per_task(14, 2, 2, 2) == 14);
  for (int seqs : {1, 2, 5, 64})
    for (int threads : {1, 2, 8}) {
      const int h = cpu::decode_heads_per_task(12, 4, seqs, threads);
      CHECK(h >= 3);
      CHECK(h <= 12);
      CHECK(h % 3 == 0);
    }
}
