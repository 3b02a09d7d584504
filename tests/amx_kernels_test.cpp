// The AMX product (executors/cpu/gemm_amx.inl): its repacking of the blocked bf16 weights into tile operands, the
// padding of x and the tile loops, run over tiles emulated in C++ as the Intel SDM defines TDPBF16PS, against the
// double reference with x rounded to bf16 (any CPU); and, where this CPU has AMX (amx_ready()), the hardware's tiles
// and the amx dispatch against the same reference.
#include <catch2/catch.hpp>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/quantization.hpp"
#include "executors/cpu/amx_block_ops.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/reference_kernels.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

std::vector<float> rounded_bf16(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return out;
}

std::vector<uint16_t> as_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// |got - want| within f32 summation error of sum |x||w| (both computed from bf16 values: the products are exact).
void require_sums_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& bound,
                        int k) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("index " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= 4e-7f * float(k + 8) * bound[i] + 1e-6f);
  }
}

struct Case {
  int m, n, k;
};

// x padded for the tiles, as gemm.cpp makes it.
struct PaddedX {
  std::vector<uint32_t> padded;
  cpu::AmxRows rows;
  PaddedX(const std::vector<float>& x, int m, int k) {
    rows = cpu::amx_rows_shape(m, (k + 1) / 2);
    padded.resize(size_t(rows.padded_rows) * size_t(rows.row_pairs));
    cpu::to_amx_rows(x.data(), k, padded.data(), rows);
    rows.data = padded.data();
  }
};

using Blocked = void (*)(const cpu::AmxRows&, const cpu::WeightMatrix&, const float*, float*, int64_t, int64_t);
using Glu = void (*)(const cpu::AmxRows&, const cpu::WeightMatrix&, int64_t, float*, int64_t, int64_t);

// Every shape: partial tiles of rows (m not a multiple of 16 or 32), of features (k not a multiple of 32, odd k),
// of weight blocks (n not a multiple of 32), with and without bias, the fused gate/up form; the task's column range
// a sub-range of whole blocks.
void check_kernels(Blocked blocked_kernel, Glu glu_kernel) {
  std::mt19937 rng(29);
  for (const Case c : {Case{1, 32, 1}, Case{15, 33, 2}, Case{16, 64, 31}, Case{17, 40, 32}, Case{31, 96, 33},
                       Case{32, 32, 64}, Case{33, 100, 80}, Case{48, 64, 255}, Case{100, 70, 768}}) {
    const auto [m, n, k] = c;
    INFO("m=" << m << " n=" << n << " k=" << k);
    const auto x = test::random_vector(size_t(m) * k, rng), w = test::random_vector(size_t(n) * k, rng),
               bias = test::random_vector(size_t(n), rng);
    const auto xr = rounded_bf16(x), wr = rounded_bf16(w);
    const auto wb16 = as_bf16(w);
    std::vector<unsigned char> storage(cpu::blocked_bytes(DType::bf16, n, k));
    const cpu::WeightMatrix blocked = cpu::pack_blocked(cpu::WeightMatrix{DType::bf16, wb16.data(), n, k, 0}, storage.data());
    const PaddedX px(x, m, k);
    std::vector<float> ref(size_t(m) * n), bound(size_t(m) * n);
    cpu::reference::matmul_nt(xr.data(), wr.data(), ref.data(), m, n, k);
    std::vector<float> xa(xr.size()), wa(wr.size());
    for (size_t i = 0; i < xr.size(); ++i) xa[i] = std::abs(xr[i]);
    for (size_t i = 0; i < wr.size(); ++i) wa[i] = std::abs(wr[i]);
    cpu::reference::matmul_nt(xa.data(), wa.data(), bound.data(), m, n, k);
    for (const bool with_bias : {false, true}) {
      std::vector<float> y(size_t(m) * n, -7.0f), want = ref;
      if (with_bias)
        for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % size_t(n)];
      blocked_kernel(px.rows, blocked, with_bias ? bias.data() : nullptr, y.data(), 0, n);
      require_sums_close(y, want, bound, k);
    }
    if (n > 32) {  // a task's range: the second block on only
      std::vector<float> y(size_t(m) * n, -7.0f);
      blocked_kernel(px.rows, blocked, nullptr, y.data(), 32, n);
      for (int r = 0; r < m; ++r) {
        for (int col = 0; col < n; ++col) {
          const size_t i = size_t(r) * n + col;
          if (col < 32) REQUIRE(y[i] == -7.0f);
          else REQUIRE(std::abs(y[i] - ref[i]) <= 4e-7f * float(k + 8) * bound[i] + 1e-6f);
        }
      }
    }
    // The fused gate/up form: n gated outputs.
    const auto u = test::random_vector(size_t(n) * k, rng);
    const auto ur = rounded_bf16(u);
    const auto ub16 = as_bf16(u);
    std::vector<unsigned char> fused(cpu::glu_bytes(DType::bf16, n, k));
    const cpu::WeightMatrix glu = cpu::pack_glu(cpu::WeightMatrix{DType::bf16, wb16.data(), n, k, 0},
                                                cpu::WeightMatrix{DType::bf16, ub16.data(), n, k, 0}, fused.data());
    std::vector<float> gate = ref, up(size_t(m) * n), y(size_t(m) * n);
    cpu::reference::matmul_nt(xr.data(), ur.data(), up.data(), m, n, k);
    cpu::reference::silu_mul(gate.data(), up.data(), m * n);
    glu_kernel(px.rows, glu, n, y.data(), 0, glu.rows);
    for (size_t i = 0; i < y.size(); ++i) {
      INFO("gated index " << i << ": " << y[i] << " vs " << gate[i]);
      REQUIRE(std::abs(y[i] - gate[i]) <= 2e-5f * std::max(1.0f, std::abs(gate[i])) * std::sqrt(float(k)));
    }
  }
}

}  // namespace

TEST_CASE("amx: the tile product over emulated tiles equals the reference with x rounded to bf16 - partial tiles of "
          "rows - features - blocks - bias - gate/up",
          "[kernels][amx]") {
  check_kernels(&cpu::gemm_nt_blocked_amx_emulated, &cpu::gemm_nt_glu_amx_emulated);
}

namespace {

// Quantized weights (8-bit codes, 4-bit ones symmetric and affine; groups of 16 .. 128 and per channel, a stride of
// 104 features: 8-byte tile steps) times int8 rows on the tiles against the double reference of the same int8
// values: y = s_x q . W(dequantized) (+ bias), and the fused gated form.
using QuantizedTiles = void (*)(const cpu::AmxQuantizedX&, const cpu::WeightMatrix&, const float*, float*, int64_t,
                                int64_t, int64_t);
void check_int8_kernel(QuantizedTiles kernel) {
  std::mt19937 rng(41);
  for (const Case c : {Case{1, 32, 16}, Case{17, 40, 80}, Case{33, 64, 100}, Case{48, 32, 256}}) {
    for (const QuantSpec spec : {QuantSpec{QuantKind::int8, 16, false}, QuantSpec{QuantKind::int8, 32, false},
                                 QuantSpec{QuantKind::int8, 64, false}, QuantSpec{QuantKind::int8, 128, false},
                                 QuantSpec{QuantKind::int8, 0, false}, QuantSpec{QuantKind::int4, 16, false},
                                 QuantSpec{QuantKind::int4, 32, false}, QuantSpec{QuantKind::int4, 32, true},
                                 QuantSpec{QuantKind::int4, 128, true}, QuantSpec{QuantKind::int4, 0, false}}) {
      const auto [m, n, k] = c;
      if (spec.group > k) continue;
      INFO("m=" << m << " n=" << n << " k=" << k << " " << describe(spec));
      const auto w = test::random_vector(size_t(2 * n) * k, rng), x = test::random_vector(size_t(m) * k, rng),
                 bias = test::random_vector(size_t(n), rng);
      const QuantizedMatrix q = quantize(DType::f32, w.data(), n, k, k, spec);
      const QuantizedMatrix up = quantize(DType::f32, w.data() + size_t(n) * k, n, k, k, spec);
      std::vector<unsigned char> plain(cpu::quantized_bytes(q)), fused(cpu::quantized_glu_bytes(q));
      const cpu::WeightMatrix wq = cpu::pack_quantized(q, plain.data());
      const cpu::WeightMatrix wg = cpu::pack_quantized_glu(q, up, fused.data());
      const cpu::QuantizedX xq = cpu::quantized_x_int8(x.data(), m, wq, 0);
      // x as the kernels see it: its int8 codes times the row's scale.
      std::vector<float> xv(size_t(m) * k), xabs(size_t(m) * k);
      for (int r = 0; r < m; ++r)
        for (int t = 0; t < k; ++t) {
          xv[size_t(r) * k + t] = float(xq.codes[r * xq.ld + t]) * xq.row_scales[r];
          xabs[size_t(r) * k + t] = std::abs(xv[size_t(r) * k + t]);
        }
      const cpu::AmxQuantizedX xa = cpu::amx_quantized_x(xq, 0);
      REQUIRE(xa.padded_rows == (m + 15) / 16 * 16);
      CHECK(xa.ld >= xq.ld);
      CHECK(xa.ld % 128 == 64);  // an odd number of cache lines
      const std::vector<float> wv = q.dequantized(), uv = up.dequantized();
      std::vector<float> wabs(wv.size());
      for (size_t i = 0; i < wv.size(); ++i) wabs[i] = std::abs(wv[i]);
      std::vector<float> ref(size_t(m) * n), bound(size_t(m) * n);
      cpu::reference::matmul_nt(xv.data(), wv.data(), ref.data(), m, n, k);
      cpu::reference::matmul_nt(xabs.data(), wabs.data(), bound.data(), m, n, k);
      std::vector<float> y(size_t(m) * n, -7.0f);
      kernel(xa, wq, bias.data(), y.data(), 0, 0, n);
      for (size_t i = 0; i < y.size(); ++i) {
        INFO("index " << i << ": " << y[i] << " vs " << ref[i] + bias[i % size_t(n)]);
        REQUIRE(std::abs(y[i] - (ref[i] + bias[i % size_t(n)])) <= 1e-5f * bound[i] + 1e-5f);
      }
      std::vector<float> upr(size_t(m) * n), gate = ref;
      cpu::reference::matmul_nt(xv.data(), uv.data(), upr.data(), m, n, k);
      cpu::reference::silu_mul(gate.data(), upr.data(), m * n);
      std::vector<float> yg(size_t(m) * n, -7.0f);
      kernel(xa, wg, nullptr, yg.data(), n, 0, wg.rows);
      for (size_t i = 0; i < yg.size(); ++i) {
        INFO("gated index " << i << ": " << yg[i] << " vs " << gate[i]);
        REQUIRE(std::abs(yg[i] - gate[i]) <= 1e-4f * (1.0f + std::abs(gate[i])) * std::sqrt(float(k)));
      }
    }
  }
}

}  // namespace

TEST_CASE("amx: 8-bit and 4-bit codes times int8 rows over emulated tiles (TDPBSUD) equal the reference of the same "
          "int8 values - groups 16 to 128 and per channel - zero points - bias - gate/up",
          "[kernels][amx]") {
  check_int8_kernel(&cpu::gemm_nt_quantized_amx_emulated);
  if (!cpu::amx_int8_ready()) {
    WARN("the hardware's int8 tiles not checked: AMX-INT8 not used here (" << cpu::amx_status() << ")");
    return;
  }
  check_int8_kernel(&cpu::gemm_nt_quantized_amx);
}

namespace {

// What another user of the tiles on this thread (a library, a benchmark) may do between two of our products: leave
// its own configuration, or release the tiles (which clears the configuration; a tile instruction then faults).
__attribute__((target("amx-tile"))) void foreign_tile_use(bool release) {
  if (release) {
    _tile_release();
    return;
  }
  alignas(64) unsigned char config[64] = {};
  config[0] = 1;
  for (int t = 0; t < 8; ++t) {
    config[16 + 2 * t] = 16;  // 16 bytes a row
    config[48 + t] = 2;       // two rows
  }
  asm volatile("" : : "r"(config) : "memory");  // as gemm_amx.cpp: the stores must reach memory
  _tile_loadconfig(config);
}

}  // namespace

TEST_CASE("amx: each product configures the tiles itself - another configuration or a release on the thread between "
          "two products changes nothing",
          "[kernels][amx]") {
  if (!cpu::amx_int8_ready()) {
    WARN("skipped: AMX-INT8 not used here (" << cpu::amx_status() << ")");
    return;
  }
  std::mt19937 rng(43);
  const int m = 32, n = 64, k = 256;
  const auto w = test::random_vector(size_t(n) * k, rng), x = test::random_vector(size_t(m) * k, rng);
  const auto wb16 = as_bf16(w);
  std::vector<unsigned char> blocked_storage(cpu::blocked_bytes(DType::bf16, n, k));
  const cpu::WeightMatrix blocked =
      cpu::pack_blocked(cpu::WeightMatrix{DType::bf16, wb16.data(), n, k, 0}, blocked_storage.data());
  const QuantizedMatrix q = quantize(DType::f32, w.data(), n, k, k, QuantSpec{QuantKind::int8, 32, false});
  std::vector<unsigned char> quantized_storage(cpu::quantized_bytes(q));
  const cpu::WeightMatrix quantized = cpu::pack_quantized(q, quantized_storage.data());
  const cpu::QuantizedX xq = cpu::quantized_x_int8(x.data(), m, quantized, 0);
  const cpu::AmxQuantizedX xa = cpu::amx_quantized_x(xq, 0);
  const cpu::AmxRows shape = cpu::amx_rows_shape(m, (k + 1) / 2);
  std::vector<uint32_t> rows(size_t(shape.padded_rows) * size_t(shape.row_pairs));
  cpu::to_amx_rows(x.data(), k, rows.data(), shape);
  cpu::AmxRows xr = shape;
  xr.data = rows.data();
  const auto bf16_product = [&] {
    std::vector<float> y(size_t(m) * n);
    cpu::gemm_nt_blocked_amx(xr, blocked, nullptr, y.data(), 0, n);
    return y;
  };
  const auto int8_product = [&] {
    std::vector<float> y(size_t(m) * n);
    cpu::gemm_nt_quantized_amx(xa, quantized, nullptr, y.data(), 0, 0, n);
    return y;
  };
  for (const bool release : {true, false}) {
    INFO((release ? "after a release" : "after another configuration"));
    // The same product twice, the foreign use between: a configuration kept from the first would be stale.
    const std::vector<float> want_bf16 = bf16_product();
    foreign_tile_use(release);
    CHECK(bf16_product() == want_bf16);
    const std::vector<float> want_int8 = int8_product();
    foreign_tile_use(release);
    CHECK(int8_product() == want_int8);
  }
}

TEST_CASE("amx: the hardware path's AVX-512 block work gives the scalar twins' bits - B operands, unpacked nibbles, "
          "group sums, outputs",
          "[kernels][amx]") {
  if (cpu::detected_isa() != cpu::Isa::avx512) {
    WARN("skipped: no AVX-512 here");
    return;
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (const int64_t k : {1, 2, 31, 32, 33, 200}) {
    INFO("k=" << k);
    std::vector<uint32_t> block(size_t(k) * 16);
    for (auto& v : block) v = bits(rng);
    const int64_t padded = (k + 1) / 2 + 16;
    std::vector<uint32_t> lo(size_t(padded) * 16, 7u), hi = lo, lo2(lo.size(), 9u), hi2 = lo2;
    cpu::amx_detail::make_b_operands(reinterpret_cast<const unsigned char*>(block.data()), k, 0, padded, lo.data(), hi.data());
    cpu::amx_detail::make_b_operands_avx512(reinterpret_cast<const unsigned char*>(block.data()), k, 0, padded, lo2.data(),
                                            hi2.data());
    CHECK(lo == lo2);
    CHECK(hi == hi2);
  }
  std::vector<unsigned char> codes(3 * 128), out(3 * 256, 1), out2(3 * 256, 2);
  for (auto& c : codes) c = static_cast<unsigned char>(bits(rng));
  cpu::amx_detail::unpack_nibble_chunks(codes.data(), 3, out.data());
  cpu::amx_detail::unpack_nibble_chunks_avx512(codes.data(), 3, out2.data());
  CHECK(out == out2);
  CHECK(out[0] == (codes[0] & 0x0F));
  CHECK(out[128] == (codes[0] >> 4));
  alignas(64) int32_t sums[32][cpu::kBlockCols];
  std::uniform_int_distribution<int32_t> sum(-2'000'000, 2'000'000);
  for (auto& row : sums)
    for (auto& v : row) v = sum(rng);
  std::vector<uint16_t> scales(32), offsets(32);
  for (int c = 0; c < 32; ++c) {
    scales[size_t(c)] = f32_to_f16(0.001f * float(c + 1));
    offsets[size_t(c)] = f32_to_f16(-0.01f * float(c % 7));
  }
  const std::vector<int32_t> code_sums = {5, -3, 100, 7, 0, -40, 9, 11};  // stride 3: rows 0 .. 2
  for (const bool affine : {false, true}) {
    alignas(64) float total[32][cpu::kBlockCols], total2[32][cpu::kBlockCols];
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 32; ++c) total[r][c] = total2[r][c] = 0.5f * float(r - c);
    cpu::amx_detail::add_group_sums(sums, 3, scales.data(), affine ? offsets.data() : nullptr, code_sums.data(), 3,
                                    affine ? 0 : 128, total);
    cpu::amx_detail::add_group_sums_avx512(sums, 3, scales.data(), affine ? offsets.data() : nullptr,
                                           code_sums.data(), 3, affine ? 0 : 128, total2);
    CHECK(std::memcmp(total, total2, sizeof(total)) == 0);
    CHECK(total[3][0] == 1.5f);  // rows past `rows` untouched
  }
  // A block's sums to the outputs: plain with and without bias, and the gated form, over values across silu's range.
  std::normal_distribution<float> wide(0.0f, 30.0f);
  alignas(64) float block_sums[32][cpu::kBlockCols];
  for (auto& row : block_sums)
    for (float& v : row) v = wide(rng);
  block_sums[0][0] = 0.0f;
  block_sums[0][1] = -0.0f;
  block_sums[0][2] = -200.0f;
  block_sums[0][3] = 200.0f;
  std::vector<float> bias(cpu::kBlockCols);
  for (float& b : bias) b = wide(rng);
  for (const auto& [glu, with_bias, outs] : {std::tuple{true, false, 16}, std::tuple{true, false, 5},
                                             std::tuple{false, true, 32}, std::tuple{false, false, 31}}) {
    INFO("glu=" << glu << " bias=" << with_bias << " outs=" << outs);
    const int64_t ldy = 40;
    std::vector<float> y(size_t(29) * ldy, 7.0f), y2 = y;
    cpu::amx_detail::write_sums(block_sums, 29, outs, glu, with_bias ? bias.data() : nullptr, y.data(), ldy);
    cpu::amx_detail::write_sums_avx512(block_sums, 29, outs, glu, with_bias ? bias.data() : nullptr, y2.data(), ldy);
    CHECK(std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)) == 0);
    CHECK(y[outs] == 7.0f);  // columns past `outs` untouched
  }
}

TEST_CASE("amx: x padded for the tiles keeps its pairs and zeros the rest", "[kernels][amx]") {
  const std::vector<float> x = {1.0f, -2.0f, 3.5f, 0.25f, 5.0f, -6.0f,   // 2 rows of 6 features: 3 pairs each
                                7.0f, 8.0f, -9.0f, 10.0f, 0.5f, 12.0f};
  std::vector<uint32_t> pairs(6);
  cpu::to_bf16_pairs(x.data(), 2, 6, pairs.data());
  const cpu::AmxRows shape = cpu::amx_rows_shape(2, 3);
  CHECK(shape.padded_rows == 16);
  CHECK(shape.padded_pairs == 16);
  REQUIRE(shape.row_pairs == 16);
  std::vector<uint32_t> out(16 * 16, 99u);
  cpu::to_amx_rows(x.data(), 6, out.data(), shape);
  CHECK(std::vector<uint32_t>(out.begin(), out.begin() + 4) ==
        std::vector<uint32_t>{pairs[0], pairs[1], pairs[2], 0});
  CHECK(std::vector<uint32_t>(out.begin() + 16, out.begin() + 20) ==
        std::vector<uint32_t>{pairs[3], pairs[4], pairs[5], 0});
  CHECK(std::count(out.begin(), out.end(), 0u) == 16 * 16 - 6);
  // An even number of 16-pair lines per row gets one more, so that a tile's rows do not share L1 sets.
  CHECK(cpu::amx_rows_shape(1, 1024).row_pairs == 1040);  // k = 2048
  CHECK(cpu::amx_rows_shape(1, 384).row_pairs == 400);    // k = 768
  CHECK(cpu::amx_rows_shape(1, 40).row_pairs == 48);      // k = 80: three lines, odd: kept
}

TEST_CASE("product_path names the kernels of each instruction set, weight layout and row count", "[kernels][amx]") {
  using cpu::ProductPath;
  cpu::WeightMatrix bf16;
  bf16.dtype = DType::bf16;
  bf16.layout = cpu::WeightLayout::blocked;
  cpu::WeightMatrix f16 = bf16, row_major = bf16, int8 = bf16, int4 = bf16;
  f16.dtype = DType::f16;
  row_major.layout = cpu::WeightLayout::row_major;
  int8.layout = int4.layout = cpu::WeightLayout::quantized;
  int8.quant = {8, 32, false};
  int4.quant = {4, 128, false};
  cpu::WeightMatrix int4_g32 = int4;  // Q4_0, Q4_K and model.quantization: int4
  int4_g32.quant = {4, 32, true};
  for (const int m : {1, 15, 16, 31, 32, 63, 64, 128}) {
    INFO("m=" << m);
    for (const cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx512}) {
      CHECK(cpu::product_path(isa, m, bf16) == ProductPath::f32_fma);
    }
    CHECK(cpu::product_path(cpu::Isa::avx512_bf16, m, bf16) == ProductPath::bf16_dot);
    CHECK(cpu::product_path(cpu::Isa::avx512_bf16, m, f16) == ProductPath::f32_fma);
    CHECK(cpu::product_path(cpu::Isa::amx, m, row_major) == ProductPath::f32_fma);
    CHECK(cpu::product_path(cpu::Isa::portable, m, int8) == ProductPath::f32_fma);
    const ProductPath vector_int8 =
        cpu::quantized_int8_activations(cpu::Isa::avx512) ? ProductPath::int8_dot : ProductPath::f32_fma;
    CHECK(cpu::product_path(cpu::Isa::avx512, m, int8) == vector_int8);
    // amx: tiles from kAmxMinRows rows (4-bit codes from kAmxMinRows4Bit in groups of kAmxMinGroup4Bit or more,
    // never in groups of 32; codes only where AMX-INT8 is ready);
    // below, vdpbf16ps or FMA on the rounded rows as this CPU's chains decided.
    const ProductPath small = cpu::bf16_dot_beats_fma() ? ProductPath::bf16_dot : ProductPath::bf16_fma;
    CHECK(cpu::product_path(cpu::Isa::amx, m, bf16) == (m >= cpu::kAmxMinRows ? ProductPath::bf16_tiles : small));
    const bool tiles8 = m >= cpu::kAmxMinRows && cpu::amx_int8_ready();
    const bool tiles4 = m >= cpu::kAmxMinRows4Bit && cpu::amx_int8_ready();
    const ProductPath amx_vector = cpu::quantized_int8_activations(cpu::Isa::amx) ? ProductPath::int8_dot
                                                                                 : ProductPath::f32_fma;
    CHECK(cpu::product_path(cpu::Isa::amx, m, int8) == (tiles8 ? ProductPath::int8_tiles : amx_vector));
    CHECK(cpu::product_path(cpu::Isa::amx, m, int4) == (tiles4 ? ProductPath::int8_tiles : amx_vector));
    CHECK(cpu::product_path(cpu::Isa::amx, m, int4_g32) == amx_vector);
  }
  CHECK(std::string(cpu::product_path_name(ProductPath::bf16_tiles)) == "bf16 (AMX)");
  CHECK(std::string(cpu::product_path_name(ProductPath::int8_dot)) == "int8 (VNNI)");
}

TEST_CASE("amx: on a CPU with AMX the hardware tiles and the amx dispatch equal the reference - else says why",
          "[kernels][amx]") {
  if (!cpu::amx_ready()) {
    WARN("skipped: AMX not used here: " << cpu::amx_status());
    CHECK_FALSE(cpu::isa_for(cpu::Isa::amx, cpu::detected_isa()).ok());
    CHECK(cpu::automatic_isa() != cpu::Isa::amx);
    return;
  }
  CHECK(cpu::automatic_isa() == cpu::Isa::amx);
  check_kernels(&cpu::gemm_nt_blocked_amx, &cpu::gemm_nt_glu_amx);
  // Through gemm_nt: tiles from kAmxMinRows rows; below, vdpbf16ps or FMA on x rounded to bf16
  // (bf16_dot_beats_fma); all equal avx512_bf16's sums.
  std::mt19937 rng(31);
  cpu::ThreadPool pool(3);
  for (const int m : {1, cpu::kAmxMinRows - 1, cpu::kAmxMinRows, 100}) {
    const int n = 96, k = 200;
    const auto x = test::random_vector(size_t(m) * k, rng), w = test::random_vector(size_t(n) * k, rng);
    const auto wb16 = as_bf16(w);
    std::vector<unsigned char> storage(cpu::blocked_bytes(DType::bf16, n, k));
    const cpu::WeightMatrix blocked = cpu::pack_blocked(cpu::WeightMatrix{DType::bf16, wb16.data(), n, k, 0}, storage.data());
    std::vector<float> y(size_t(m) * n), want(size_t(m) * n);
    cpu::gemm_nt(x.data(), blocked, nullptr, y.data(), m, pool, {cpu::Isa::amx});
    cpu::gemm_nt(x.data(), blocked, nullptr, want.data(), m, pool, {cpu::Isa::avx512_bf16});
    for (size_t i = 0; i < y.size(); ++i) REQUIRE(std::abs(y[i] - want[i]) <= 1e-4f * (1.0f + std::abs(want[i])));
  }
}
