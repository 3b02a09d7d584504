// Weight-only quantization (core/quantization.hpp) and the quantized GEMM of every instruction set
// (executors/cpu/quantized_weights.hpp) against a double-precision reference on the dequantized weights.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/quantization.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/reference_kernels.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

using test::random_vector;

std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::abs(x);
  return v;
}

// x with each row rounded to int8 codes of one scale (what the VNNI path multiplies), as f32.
std::vector<float> rows_through_int8(const std::vector<float>& x, int m, int64_t k) {
  std::vector<int8_t> codes(x.size());
  std::vector<float> scales(m), out(x.size());
  cpu::quantize_rows_int8(x.data(), m, k, k, codes.data(), scales.data());
  for (int i = 0; i < m; ++i)
    for (int64_t t = 0; t < k; ++t) out[i * k + t] = scales[i] * codes[i * k + t];
  return out;
}

// The int8-activation kernels, with whether this CPU runs them: VNNI (512- and 256-bit) and vpmaddubsw (AVX2,
// AVX-512).
using QuantizedKernel = void (*)(const cpu::QuantizedX&, const cpu::WeightMatrix&, const float*, float*, int64_t,
                                 int64_t, int64_t);
std::vector<std::tuple<bool, QuantizedKernel, const char*>> int8_kernels() {
  return {{cpu::cpu_has_avx512_vnni(), &cpu::gemm_nt_quantized_avx512_vnni, "avx512-vnni"},
          {cpu::cpu_has_avx_vnni(), &cpu::gemm_nt_quantized_avx_vnni, "avx-vnni"},
          {cpu::isa_for(cpu::Isa::avx2, cpu::detected_isa()).ok(), &cpu::gemm_nt_quantized_avx2_int8, "avx2-int8"},
          {cpu::isa_for(cpu::Isa::avx512, cpu::detected_isa()).ok(), &cpu::gemm_nt_quantized_avx512_int8,
           "avx512-int8"}};
}

const QuantSpec kSpecs[] = {
    {QuantKind::int8, 0, false}, {QuantKind::int8, 32, false}, {QuantKind::int8, 16, false},
    {QuantKind::int4, 32, false}, {QuantKind::int4, 128, false}, {QuantKind::int4, 32, true},
    {QuantKind::int4, 64, true},
};

// 6-bit codes as GGUF's Q6_K holds them (quantize() makes none): symmetric around 32 in groups of 16, scale = max
// |w| / 31 rounded to f16, codes round(w / scale) + 32 clamped to 0..63.
QuantizedMatrix quantize_six_bit(const float* w, int64_t rows, int64_t cols) {
  QuantizedMatrix q;
  q.bits = 6;
  q.rows = rows;
  q.cols = cols;
  q.group = 16;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < q.groups(); ++g) {
      const int64_t c0 = g * 16, c1 = std::min(cols, c0 + 16);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::abs(w[r * cols + c]));
      q.scales.push_back(f32_to_f16(amax / 31.0f));
    }
    for (int64_t c = 0; c < cols; ++c) {
      const float scale = q.scale(r, c / 16);
      const float code = scale > 0 ? std::nearbyint(w[r * cols + c] / scale) + 32.0f : 32.0f;
      q.codes.push_back(static_cast<uint8_t>(std::clamp(code, 0.0f, 63.0f)));
    }
  }
  return q;
}

// Every kind of matrix the kernels meet: quantize()'s specs and the 6-bit codes of GGUF files.
struct Kind {
  std::string name;
  std::function<QuantizedMatrix(const float* w, int64_t rows, int64_t cols)> make;
};
std::vector<Kind> kinds() {
  std::vector<Kind> out;
  for (const QuantSpec& spec : kSpecs)
    out.push_back({describe(spec), [spec](const float* w, int64_t rows, int64_t cols) {
                     return quantize(DType::f32, w, rows, cols, 0, spec);
                   }});
  out.push_back({"6-bit (groups of 16, as Q6_K)", &quantize_six_bit});
  return out;
}

}  // namespace

TEST_CASE("quantize keeps every value within half a step of its group and slices on group bounds", "[quant]") {
  std::mt19937 rng(3);
  for (const QuantSpec& spec : kSpecs) {
    const int64_t rows = 9, cols = 200;
    const auto w = random_vector(size_t(rows * cols), rng, 0.05f);
    const QuantizedMatrix q = quantize(DType::f32, w.data(), rows, cols, 0, spec);
    INFO(describe(spec));
    REQUIRE(q.validate().ok());
    CHECK(q.group == (spec.group ? spec.group : cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float step = std::abs(q.scale(r, c / q.group));
        // Half a step, and for symmetric int4 the clamp of the largest positive value to code 15 (one step).
        const float allowed = (spec.kind == QuantKind::int4 && !spec.zero_points ? 1.0f : 0.5f) * step * 1.001f + 1e-7f;
        REQUIRE(std::abs(q.value(r, c) - w[r * cols + c]) <= allowed);
      }
    }
    if (q.group < cols) {
      const int64_t width = std::min<int64_t>(q.group, cols - q.group);  // the next group, maybe the partial last
      auto part = q.slice(2, 5, q.group, width);
      REQUIRE(part.ok());
      for (int64_t r = 0; r < 5; ++r)
        for (int64_t c = 0; c < width; ++c) REQUIRE(part->value(r, c) == q.value(2 + r, q.group + c));
      CHECK_FALSE(q.slice(0, 1, 1, q.group).ok());  // not on a group bound
    }
  }
  CHECK_FALSE(make_quant_spec(QuantKind::int8, 48, false).ok());
  CHECK_FALSE(make_quant_spec(QuantKind::int8, 32, true).ok());
  CHECK(make_quant_spec(QuantKind::int4, 0, false)->group == 32);
  CHECK_FALSE(parse_quant_kind("int3").ok());
}

TEST_CASE("6-bit matrices: codes 0..63 around 32 in symmetric groups of a multiple of 16, anything else refused",
          "[quant]") {
  std::mt19937 rng(7);
  const auto w = random_vector(size_t(3 * 48), rng);
  const QuantizedMatrix q = quantize_six_bit(w.data(), 3, 48);
  REQUIRE(q.validate().ok());
  CHECK(q.zero() == 32);
  CHECK(q.value(1, 5) == q.scale(1, 0) * (float(q.codes[48 + 5]) - 32.0f));
  QuantizedMatrix bad = q;
  bad.codes[7] = 64;
  CHECK(bad.validate().error().message == "6-bit codes above 63");
  bad = q;
  bad.offsets.assign(bad.scales.size(), 0);
  CHECK_FALSE(bad.validate().ok());
  bad = q;
  bad.group = 24;
  bad.scales.resize(size_t(3 * bad.groups()));
  CHECK_FALSE(bad.validate().ok());
  bad = q;
  bad.bits = 5;
  CHECK_FALSE(bad.validate().ok());
  auto part = q.slice(1, 2, 16, 32);  // TP shards fall on its groups
  REQUIRE(part.ok());
  CHECK(part->bits == 6);
  CHECK(part->value(0, 0) == q.value(1, 16));
}

TEST_CASE("packed quantized rows dequantize to the matrix's values", "[quant]") {
  std::mt19937 rng(5);
  for (const Kind& kind : kinds()) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {33, 172}, {64, 256}, {70, 45}}) {
      INFO(kind.name << " " << rows << " x " << cols);
      const auto w = random_vector(size_t(rows * cols), rng);
      const QuantizedMatrix q = kind.make(w.data(), rows, cols);
      REQUIRE(q.validate().ok());
      std::vector<unsigned char> storage(cpu::quantized_bytes(q));
      const cpu::WeightMatrix packed = cpu::pack_quantized(q, storage.data());
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        cpu::quantized_row_to_f32(packed, r, row.data());
        for (int64_t c = 0; c < cols; ++c) REQUIRE(row[c] == q.value(r, c));
      }
    }
  }
}

// Every path against the double reference on the dequantized weights: the f32-activation kernels within f32
// summation error; the int8-activation (VNNI) kernel within f32 error of the reference on x rounded per row to int8,
// and within half an x step times sum |w| of the unrounded one (the stated bound of per-row activation quantization).
TEST_CASE("quantized gemm and glu match the reference on every instruction set", "[quant][kernels]") {
  std::mt19937 rng(11);
  cpu::ThreadPool pool(3);
  const cpu::Isa best = cpu::detected_isa();
  for (const Kind& kind : kinds()) {
    for (auto [m, n, k] : {std::tuple{1, 1, 8}, {3, 7, 5}, {12, 64, 172}, {13, 96, 64}, {32, 100, 33},
                           {40, 160, 700}, {7, 45, 256}}) {
      INFO(kind.name << " m=" << m << " n=" << n << " k=" << k);
      const auto x = random_vector(size_t(m) * k, rng), w32 = random_vector(size_t(n) * k, rng, 0.1f);
      const auto bias = random_vector(n, rng);
      const QuantizedMatrix q = kind.make(w32.data(), n, k);
      const auto wq = q.dequantized();
      std::vector<unsigned char> storage(cpu::quantized_bytes(q));
      const cpu::WeightMatrix packed = cpu::pack_quantized(q, storage.data());
      std::vector<float> ref(size_t(m) * n), bound(size_t(m) * n);
      cpu::reference::matmul_nt(x.data(), wq.data(), ref.data(), m, n, k);
      cpu::reference::matmul_nt(absolute(x).data(), absolute(wq).data(), bound.data(), m, n, k);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += bias[i % n];
      auto check_f32 = [&](const std::vector<float>& y, const char* path) {
        INFO(path);
        for (size_t i = 0; i < y.size(); ++i) {
          INFO("index " << i << ": " << y[i] << " vs " << ref[i]);
          REQUIRE(std::abs(y[i] - ref[i]) <= 2e-6f * k * (bound[i] + std::abs(bias[i % n])) + 1e-6f);
        }
      };
      std::vector<float> y(size_t(m) * n);
      {  // the f32-activation kernel (portable)
        const cpu::QuantizedX xq = cpu::quantized_x_f32(x.data(), m, packed, 0);
        std::fill(y.begin(), y.end(), 0.0f);
        cpu::gemm_nt_quantized_portable(xq, packed, bias.data(), y.data(), 0, 0, n);
        check_f32(y, "portable");
      }
      // The int8-activation kernels directly (where the CPU has them), then gemm_nt on each ISA (threads, and the
      // path that ISA takes).
      const auto x8 = rows_through_int8(x, m, k);
      std::vector<float> ref8(size_t(m) * n);
      cpu::reference::matmul_nt(x8.data(), wq.data(), ref8.data(), m, n, k);
      auto check_int8 = [&](const std::vector<float>& y, const char* path) {
        INFO(path);
        for (size_t i = 0; i < y.size(); ++i) {
          const int row = static_cast<int>(i / n);
          float x_step = 0;
          for (int64_t t = 0; t < k; ++t) x_step = std::max(x_step, std::abs(x[row * k + t]) / 127.0f);
          float w_sum = 0;
          for (int64_t t = 0; t < k; ++t) w_sum += std::abs(wq[(i % n) * k + t]);
          INFO("index " << i << ": " << y[i] << " vs " << ref8[i] + bias[i % n] << " (x rounded), " << ref[i]);
          REQUIRE(std::abs(y[i] - (ref8[i] + bias[i % n])) <= 2e-6f * k * (bound[i] + std::abs(bias[i % n])) + 1e-6f);
          REQUIRE(std::abs(y[i] - ref[i]) <= 0.5f * x_step * w_sum * 1.001f + 2e-6f * k * bound[i] + 1e-5f);
        }
      };
      for (auto [has, kernel, name] : int8_kernels()) {
        if (!has) continue;
        const cpu::QuantizedX xq = cpu::quantized_x_int8(x.data(), m, packed, 0);
        std::fill(y.begin(), y.end(), 0.0f);
        kernel(xq, packed, bias.data(), y.data(), 0, 0, n);
        check_int8(y, name);
      }
      for (cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512}) {
        if (!cpu::isa_for(isa, best).ok()) continue;
        cpu::gemm_nt(x.data(), packed, bias.data(), y.data(), m, pool, {isa});
        if (cpu::quantized_int8_activations(isa)) check_int8(y, cpu::isa_name(isa));
        else check_f32(y, cpu::isa_name(isa));
      }

      // The fused gate/up product: silu(x G^T) * (x U^T) with G = these weights, U new ones.
      const auto u32 = random_vector(size_t(n) * k, rng, 0.1f);
      const QuantizedMatrix qu = kind.make(u32.data(), n, k);
      std::vector<unsigned char> fused(cpu::quantized_glu_bytes(q));
      const cpu::WeightMatrix glu = cpu::pack_quantized_glu(q, qu, fused.data());
      const auto x_used = cpu::quantized_int8_activations(best) ? x8 : x;
      std::vector<float> gate(size_t(m) * n), up(size_t(m) * n), yg(size_t(m) * n);
      cpu::reference::matmul_nt(x_used.data(), wq.data(), gate.data(), m, n, k);
      cpu::reference::matmul_nt(x_used.data(), qu.dequantized().data(), up.data(), m, n, k);
      cpu::reference::silu_mul(gate.data(), up.data(), m * n);
      cpu::gemm_nt_glu(x.data(), glu, n, yg.data(), m, pool, best);
      float max_ref = 1.0f;
      for (float v : gate) max_ref = std::max(max_ref, std::abs(v));
      for (size_t i = 0; i < yg.size(); ++i) {
        INFO("glu index " << i << ": " << yg[i] << " vs " << gate[i]);
        REQUIRE(std::abs(yg[i] - gate[i]) <= 2e-5f * std::max(1.0f, std::sqrt(k / 10.0f)) * max_ref);
      }
    }
  }
}

// The largest products an int8 kernel meets: 8-bit codes 0 and 255 (an affine group) and 1 and 255 (symmetric),
// 6-bit 0 and 63, 4-bit 0 and 15, each times an x code of 127 of the same sign, so that every product of a word adds
// up: vpmaddubsw's saturating 16-bit pair sums must not clip them (AVX2 centres 8-bit codes first; two 6-bit pairs
// come within 2.3% of the int16 limit).
TEST_CASE("int8-activation kernels are exact on the extreme codes", "[quant][kernels]") {
  const int m = 3, n = 40;
  const int64_t k = 256;
  for (auto [bits, group] : {std::pair{8, 32}, std::pair{6, 16}, std::pair{6, 64}, std::pair{4, 32}, std::pair{4, 128}}) {
    for (bool affine : {true, false}) {  // 128: 16 chunks a group
      if (bits == 6 && affine) continue;  // 6-bit codes are symmetric
      QuantizedMatrix q;
      q.bits = bits;
      q.rows = n;
      q.cols = k;
      q.group = group;
      const int top = bits == 8 ? 255 : bits == 6 ? 63 : 15, bottom = affine ? 0 : (bits == 8 ? 1 : 0);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c)  // pairs of features alike
          q.codes.push_back(static_cast<uint8_t>((c / 2 + r) % 2 ? top : bottom));
      q.scales.assign(size_t(n * q.groups()), f32_to_f16(0.01f));
      if (affine) q.offsets.assign(size_t(n * q.groups()), f32_to_f16(-1.28f));
      REQUIRE(q.validate().ok());
      const auto wq = q.dequantized();
      std::vector<float> x(size_t(m) * k);
      for (int i = 0; i < m; ++i)  // the sign of each weight: every product positive
        for (int64_t c = 0; c < k; ++c) x[i * k + c] = (wq[c] > 0 ? 1.0f : -1.0f) * (i + 1);
      std::vector<unsigned char> storage(cpu::quantized_bytes(q));
      const cpu::WeightMatrix packed = cpu::pack_quantized(q, storage.data());
      std::vector<float> ref(size_t(m) * n), y(size_t(m) * n);
      cpu::reference::matmul_nt(x.data(), wq.data(), ref.data(), m, n, k);  // x is exact in int8 (one value per row)
      for (auto [has, kernel, name] : int8_kernels()) {
        if (!has) continue;
        INFO(name << ", " << bits << " bits, groups of " << group << (affine ? ", affine" : ", symmetric"));
        const cpu::QuantizedX xq = cpu::quantized_x_int8(x.data(), m, packed, 0);
        kernel(xq, packed, nullptr, y.data(), 0, 0, n);
        for (size_t i = 0; i < y.size(); ++i) {
          INFO("index " << i);
          REQUIRE(y[i] == Approx(ref[i]).epsilon(1e-5));
        }
      }
      for (auto [isa, vnni] : {std::pair{cpu::Isa::avx2, cpu::cpu_has_avx_vnni()},
                               std::pair{cpu::Isa::avx512, cpu::cpu_has_avx512_vnni()}}) {  // what products take
        if (!cpu::isa_for(isa, cpu::detected_isa()).ok()) continue;
        CHECK(cpu::product_path(isa, m, packed) == (vnni ? cpu::ProductPath::int8_dot : cpu::ProductPath::int8_pairs));
      }
    }
  }
}

TEST_CASE("gemm_nt_multi on quantized outputs of different groupings equals one product each", "[quant][kernels]") {
  std::mt19937 rng(13);
  cpu::ThreadPool pool(2);
  const int m = 9, k = 96;
  const auto x = random_vector(size_t(m) * k, rng);
  std::vector<QuantizedMatrix> qs;
  for (const QuantSpec& spec : {kSpecs[0], kSpecs[3], kSpecs[6]}) {
    const auto w = random_vector(size_t(40) * k, rng, 0.1f);
    qs.push_back(quantize(DType::f32, w.data(), 40, k, 0, spec));
  }
  std::vector<std::vector<unsigned char>> storage;
  std::vector<cpu::WeightMatrix> packed;
  for (const auto& q : qs) {
    storage.emplace_back(cpu::quantized_bytes(q));
    packed.push_back(cpu::pack_quantized(q, storage.back().data()));
  }
  std::vector<std::vector<float>> multi(3, std::vector<float>(size_t(m) * 40)), single = multi;
  cpu::GemmOutput outs[3];
  for (int o = 0; o < 3; ++o) outs[o] = {&packed[o], nullptr, multi[o].data()};
  cpu::gemm_nt_multi(x.data(), outs, 3, m, pool);
  for (int o = 0; o < 3; ++o) {
    cpu::gemm_nt(x.data(), packed[o], nullptr, single[o].data(), m, pool);
    CHECK(multi[o] == single[o]);
  }
  // A float matrix beside quantized ones (a GGUF file's F16 tensor among quantized ones).
  const auto wf = random_vector(size_t(40) * k, rng, 0.1f);
  std::vector<unsigned char> blocked(cpu::blocked_bytes(DType::f32, 40, k));
  const cpu::WeightMatrix float_w = cpu::pack_blocked(cpu::WeightMatrix{DType::f32, wf.data(), 40, k, 0}, blocked.data());
  std::vector<float> mixed(size_t(m) * 40), alone(size_t(m) * 40);
  outs[1] = {&float_w, nullptr, mixed.data()};
  cpu::gemm_nt_multi(x.data(), outs, 3, m, pool);
  cpu::gemm_nt(x.data(), float_w, nullptr, alone.data(), m, pool);
  CHECK(mixed == alone);
  CHECK(multi[0] == single[0]);
}
