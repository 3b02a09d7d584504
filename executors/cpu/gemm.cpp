#include "executors/cpu/gemm.hpp"

#include <cpuid.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "core/dtype.hpp"
#include "core/status.hpp"
#include "executors/cpu/aligned_vector.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/cpu_features.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/row_tasks.hpp"
#include "executors/cpu/thread_pool.hpp"

#ifdef ACTORD_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace actord::cpu {

Isa detected_isa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    // clang before 16 knows no "f16c" for __builtin_cpu_supports (the fuzz build uses clang 14): CPUID.1:ECX.F16C.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return Isa::avx512;
    if (avx2) return Isa::avx2;
    return Isa::portable;
  }();
  return isa;
}

bool cpu_has_avx512_bf16() {
  static const bool has = detected_isa() == Isa::avx512 && __builtin_cpu_supports("avx512bf16");
  return has;
}

Isa automatic_isa() {
  static const Isa isa = *isa_for(Isa::automatic, detected_isa());
  return isa;
}

bool cpu_has_avx512_vnni() {
  static const bool has =
      detected_isa() == Isa::avx512 && __builtin_cpu_supports("avx512vnni") && !extension_hidden("avx512_vnni");
  return has;
}

bool cpu_has_avx_vnni() {
  static const bool has = [] {
    if (detected_isa() < Isa::avx2 || extension_hidden("avx_vnni")) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // CPUID.(EAX=7, ECX=1):EAX bit 4 (clang 14 knows no "avxvnni")
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4)) != 0;
  }();
  return has;
}

bool vnni_products(Isa isa) {
  if (isa == Isa::automatic) isa = automatic_isa();
  return isa >= Isa::avx512 ? cpu_has_avx512_vnni() : isa == Isa::avx2 && cpu_has_avx_vnni();
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::automatic: return "automatic";
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::amx: return "amx";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "auto") return Isa::automatic;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

bool amx_permitted(const char** why);  // gemm_amx.cpp
bool cpu_has_amx_int8();                // gemm_amx.cpp

AmxRows amx_rows_shape(int m, int64_t pairs) {
  AmxRows shape;
  shape.m = m;
  shape.padded_rows = (m + 15) / 16 * 16;
  shape.padded_pairs = (pairs + 15) / 16 * 16;
  shape.row_pairs = shape.padded_pairs + (shape.padded_pairs / 16 % 2 == 0 ? 16 : 0);
  return shape;
}

void to_amx_rows(const float* x, int64_t k, uint32_t* out, const AmxRows& shape) {
  const int64_t pairs = (k + 1) / 2;
  for (int i = 0; i < shape.padded_rows; ++i) {
    uint32_t* row = out + static_cast<int64_t>(i) * shape.row_pairs;
    const int64_t have = i < shape.m ? pairs : 0;
    if (have) to_bf16_pairs(x + static_cast<int64_t>(i) * k, 1, k, row);
    std::fill(row + have, row + shape.row_pairs, 0u);
  }
}

namespace {

// x (m rows of k features) rounded to bf16 and padded for the tiles, in this thread's buffer (valid until its next
// call).
AmxRows amx_rows(const float* x, int m, int64_t k) {
  thread_local std::vector<uint32_t> storage;
  AmxRows out = amx_rows_shape(m, (k + 1) / 2);
  storage.resize(static_cast<size_t>(out.padded_rows) * static_cast<size_t>(out.row_pairs));
  to_amx_rows(x, k, storage.data(), out);
  out.data = storage.data();
  return out;
}

struct AmxState {
  bool ready = false;
  const char* why = "not checked";
};

// Values in [-1, 1) for the probe products (a fixed linear congruential sequence: the same on every start).
std::vector<float> probe_values(size_t n, uint32_t seed) {
  std::vector<float> out(n);
  for (float& v : out) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(seed >> 8) - (1 << 23)) / float(1 << 23);
  }
  return out;
}

// Whether a probe's tile product agrees with the reference kernel's: within 1e-4 of the largest output (f32 sums in
// another order).
bool probe_agrees(const std::vector<float>& want, const std::vector<float>& got) {
  double scale = 1e-6, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double(want[i])));
    worst = std::max(worst, std::fabs(double(want[i]) - double(got[i])));
  }
  return worst <= 1e-4 * scale;
}

// A product on tiles against the AVX512-BF16 kernel's: 40 rows (two A tiles and a padded one), 80 features (a
// padded chunk), two weight blocks of bf16, a bias and the fused gated form; agreement within f32 summation error.
bool amx_probe_agrees() {
  constexpr int m = 40, k = 80, n = 64;
  std::vector<uint16_t> w(static_cast<size_t>(n) * k), up(w.size());
  const std::vector<float> w32 = probe_values(2 * w.size(), 12345), x = probe_values(size_t(m) * k, 1),
                           bias = probe_values(n, 2);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = f32_to_bf16(w32[i]);
    up[i] = f32_to_bf16(w32[w.size() + i]);
  }
  const WeightMatrix src{DType::bf16, w.data(), n, k}, src_up{DType::bf16, up.data(), n, k};
  std::vector<unsigned char> blocked(blocked_bytes(DType::bf16, n, k)), glu(glu_bytes(DType::bf16, n, k));
  const WeightMatrix wb = pack_blocked(src, blocked.data());
  const WeightMatrix wg = pack_glu(src, src_up, glu.data());
  std::vector<uint32_t> pairs(static_cast<size_t>(m) * ((k + 1) / 2));
  to_bf16_pairs(x.data(), m, k, pairs.data());
  const Bf16Rows xb{pairs.data(), m, (k + 1) / 2};
  const AmxRows xa = amx_rows(x.data(), m, k);  // as the dispatch makes it
  std::vector<float> want(static_cast<size_t>(m) * n), got(want.size());
  gemm_nt_blocked_avx512_bf16(xb, wb, bias.data(), want.data(), 0, n);
  gemm_nt_blocked_amx(xa, wb, bias.data(), got.data(), 0, n);
  if (!probe_agrees(want, got)) return false;
  want.assign(static_cast<size_t>(m) * n, 0.0f);  // n gated outputs of a 2n-row fused matrix
  got.assign(want.size(), 0.0f);
  gemm_nt_glu_avx512_bf16(xb, wg, n, want.data(), 0, wg.rows);
  gemm_nt_glu_amx(xa, wg, n, got.data(), 0, wg.rows);
  return probe_agrees(want, got);
}

// A quantized product on tiles against the AVX512-VNNI kernel's: 40 rows, 80 features, 64 outputs, and the fused
// gated form; 8-bit codes in groups of 16 and per channel, 4-bit ones in groups of 32, symmetric and affine.
bool amx_int8_probe_agrees() {
  constexpr int m = 40, k = 80, n = 64;
  const std::vector<float> w = probe_values(size_t(2 * n) * k, 777), x = probe_values(size_t(m) * k, 3),
                           bias = probe_values(n, 4);
  for (const QuantSpec spec : {QuantSpec{QuantKind::int8, 16, false}, QuantSpec{QuantKind::int8, 0, false},
                               QuantSpec{QuantKind::int4, 32, false}, QuantSpec{QuantKind::int4, 32, true}}) {
    const QuantizedMatrix q = quantize(DType::f32, w.data(), n, k, k, spec);
    const QuantizedMatrix up = quantize(DType::f32, w.data() + size_t(n) * k, n, k, k, spec);
    std::vector<unsigned char> plain(quantized_bytes(q)), fused(quantized_glu_bytes(q));
    const WeightMatrix wq = pack_quantized(q, plain.data());
    const WeightMatrix wg = pack_quantized_glu(q, up, fused.data());
    for (const WeightMatrix* matrix : {&wq, &wg}) {
      const bool glu = matrix == &wg;
      const QuantizedX xq = quantized_x_int8(x.data(), m, *matrix, 7);
      const AmxQuantizedX xa = amx_quantized_x(xq, 7);
      std::vector<float> want(static_cast<size_t>(m) * n), got(want.size());
      gemm_nt_quantized_avx512_vnni(xq, *matrix, glu ? nullptr : bias.data(), want.data(), glu ? n : 0, 0,
                                    matrix->rows);
      gemm_nt_quantized_amx(xa, *matrix, glu ? nullptr : bias.data(), got.data(), glu ? n : 0, 0, matrix->rows);
      if (!probe_agrees(want, got)) return false;
    }
  }
  return true;
}

const AmxState& amx_state() {
  static const AmxState state = [] {
    AmxState s;
    if (detected_isa() != Isa::avx512 || !cpu_has_avx512_bf16()) {
      s.why = "no AVX512-BF16";
    } else if (!amx_permitted(&s.why)) {
    } else if (!amx_probe_agrees()) {
      s.why = "a probe product on the tiles disagreed with the AVX512-BF16 kernel (AMX left unused)";
    } else {
      s.ready = true;
      s.why = "ready";
    }
    return s;
  }();
  return state;
}

}  // namespace

AmxQuantizedX amx_quantized_x(const QuantizedX& xq, int slot) {
  thread_local std::vector<int8_t> storage[8];
  AmxQuantizedX out;
  out.x = &xq;
  out.padded_rows = (xq.m + 15) / 16 * 16;
  const int64_t lines = (xq.ld + 63) / 64;
  out.ld = (lines + (lines % 2 == 0 ? 1 : 0)) * 64;
  std::vector<int8_t>& buffer = storage[slot];
  buffer.assign(static_cast<size_t>(out.padded_rows) * static_cast<size_t>(out.ld), 0);
  for (int i = 0; i < xq.m; ++i)
    std::memcpy(buffer.data() + i * out.ld, xq.codes + i * xq.ld, static_cast<size_t>(xq.ld));
  out.codes = buffer.data();
  return out;
}

bool int8_tiles(Isa isa, int m, const WeightMatrix& w) {
  if (isa != Isa::amx) return false;
  if (w.quant.bits == 6) return false;  // no tile kernel for 6-bit codes (Q6_K's groups of 16 would not gain)
  if (w.quant.bits == 4 && (m < kAmxMinRows4Bit || w.quant.group < kAmxMinGroup4Bit)) return false;
  return m >= kAmxMinRows && amx_int8_ready();
}

ProductPath product_path(Isa isa, int m, const WeightMatrix& w) {
  if (isa == Isa::automatic) isa = automatic_isa();
  if (w.layout == WeightLayout::quantized) {
    if (int8_tiles(isa, m, w)) return ProductPath::int8_tiles;
    if (!quantized_int8_activations(isa)) return ProductPath::f32_fma;
    return vnni_products(isa) ? ProductPath::int8_dot : ProductPath::int8_pairs;
  }
  if (w.layout == WeightLayout::row_major || w.dtype != DType::bf16 || !bf16_dot_products(isa))
    return ProductPath::f32_fma;
  if (isa == Isa::amx && m >= kAmxMinRows) return ProductPath::bf16_tiles;
  // Below the tiles under amx, vdpbf16ps only where it does not lose to FMA here.
  if (isa == Isa::amx && !bf16_dot_beats_fma()) return ProductPath::bf16_fma;
  return ProductPath::bf16_dot;
}

const char* product_path_name(ProductPath path) {
  switch (path) {
    case ProductPath::f32_fma: return "f32 (FMA)";
    case ProductPath::bf16_fma: return "bf16 (FMA)";
    case ProductPath::bf16_dot: return "bf16 (dpbf16)";
    case ProductPath::bf16_tiles: return "bf16 (AMX)";
    case ProductPath::int8_dot: return "int8 (VNNI)";
    case ProductPath::int8_pairs: return "int8 (vpmaddubsw)";
    case ProductPath::int8_tiles: return "int8 (AMX)";
  }
  return "?";
}

bool amx_ready() { return amx_state().ready; }

bool bf16_dot_beats_fma() {
  static const bool dot = [] {
    if (detected_isa() != Isa::avx512 || !cpu_has_avx512_bf16()) return false;
    // Multiply-adds per second of `chains` run for `iterations` rounds of `macs` each.
    const auto rate = [](float (*chains)(long), long iterations, double macs) {
      const auto t0 = std::chrono::steady_clock::now();
      volatile float sink = chains(iterations);
      (void)sink;
      return double(iterations) * macs / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    double dot_rate = 0, fma_rate = 0;
    for (int round = 0; round < 3; ++round) {
      dot_rate = std::max(dot_rate, rate(&bf16_dot_chains, 50'000, kBf16DotChainMacs));
      fma_rate = std::max(fma_rate, rate(&fma_chains, 100'000, kFmaChainMacs));
    }
    return dot_rate >= 1.25 * fma_rate;
  }();
  return dot;
}

bool amx_int8_ready() {
  static const bool ready = amx_ready() && cpu_has_amx_int8() && cpu_has_avx512_vnni() && amx_int8_probe_agrees();
  return ready;
}
const char* amx_status() { return amx_state().why; }

Result<Isa> isa_for(Isa requested, Isa cpu) {
  if (requested == Isa::automatic) {
    if (cpu != Isa::avx512 || !cpu_has_avx512_bf16()) return cpu;
    if (amx_ready()) return Isa::amx;
    // vdpbf16ps does 32 multiply-adds where an FMA does 16, but the Intel cores measured (with AMX or without) issue
    // it at a quarter of FMA's rate: there the f32 FMA kernel (f32 activations) is the faster one.
    return bf16_dot_beats_fma() ? Isa::avx512_bf16 : Isa::avx512;
  }
  if (requested == Isa::amx) {
    if (cpu == Isa::avx512 && cpu_has_avx512_bf16() && amx_ready()) return requested;
    return make_error(Errc::unsupported, std::string("instruction set amx is not available here (") +
                                             (cpu == Isa::avx512 && cpu_has_avx512_bf16() ? amx_status()
                                                                                           : "no AVX512-BF16") +
                                             "; the best it runs is " + isa_name(cpu) + ")");
  }
  if (requested == Isa::avx512_bf16) {
    if (cpu == Isa::avx512 && cpu_has_avx512_bf16()) return requested;
    return make_error(Errc::unsupported, std::string("instruction set avx512_bf16 is not available on this CPU (it "
                                                     "lacks AVX512-BF16; the best it runs is ") +
                                             isa_name(cpu) + ")");
  }
  // portable < avx2 < avx512: a CPU that runs one runs those before it.
  if (static_cast<int>(requested) <= static_cast<int>(cpu)) return requested;
  const char* usable = cpu == Isa::portable ? "auto or portable" : "auto, portable or avx2";
  return make_error(Errc::unsupported, std::string("instruction set ") + isa_name(requested) +
                                           " is not available on this CPU (the best it runs is " + isa_name(cpu) +
                                           "; use " + usable + ")");
}

Result<Isa> isa_for(std::string_view name, Isa cpu) {
  const auto requested = parse_isa(name);
  if (!requested) {
    return make_error(Errc::invalid_config, "unknown instruction set '" + std::string(name) +
                                                "' (known: auto, portable, avx2, avx512, avx512_bf16, amx)");
  }
  return isa_for(*requested, cpu);
}

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::automatic: return "automatic";
    case Kernel::rows: return "rows";
    case Kernel::packed: return "packed";
    case Kernel::blas: return "blas";
  }
  return "?";
}

int packed_min_rows(Isa) { return 16; }

int blas_min_rows(Isa) { return 1 << 30; }

void convert_rows_to_f32(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out) {
  if (detected_isa() == Isa::avx512) return convert_rows_to_f32_avx512(w, row_begin, rows, out);
  if (detected_isa() == Isa::avx2) return convert_rows_to_f32_avx2(w, row_begin, rows, out);
  for (int64_t r = 0; r < rows; ++r) convert_to_f32(w.dtype, w.row(row_begin + r), out + r * w.cols, size_t(w.cols));
}

#ifdef ACTORD_HAVE_OPENBLAS
// A serial OpenBLAS (no locking) picked up at run time in place of the pthread build would corrupt concurrent calls:
// then the built-in kernels do the work.
bool have_blas() {
  static const bool usable = openblas_get_parallel() != 0;
  return usable;
}

void gemm_nt_rows_blas(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                       int64_t n_end) {
  // Each call runs on its caller's thread; OpenBLAS's own threads would fight the pool for the cores.
  static const bool single_threaded = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)single_threaded;
  ACTORD_CHECK_MSG(have_blas(), "gemm: the OpenBLAS loaded is a serial build without locking; use the pthread build");
  const int64_t k = w.cols, n = w.rows;
  constexpr int64_t kPanelRows = 128;  // 128 x k f32 stays in L2 while sgemm sweeps x
  std::vector<float> panel;
  for (int64_t j = n_begin; j < n_end; j += kPanelRows) {
    const int64_t rows = std::min(kPanelRows, n_end - j);
    const float* b;
    int64_t ldb;
    if (w.dtype == DType::f32) {
      b = reinterpret_cast<const float*>(w.row(j));
      ldb = w.stride();
    } else {
      panel.resize(static_cast<size_t>(rows * k));
      convert_rows_to_f32(w, j, rows, panel.data());
      b = panel.data();
      ldb = k;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(rows), static_cast<int>(k), 1.0f, x,
                static_cast<int>(k), b, static_cast<int>(ldb), 0.0f, y + j, static_cast<int>(n));
    if (bias) {
      for (int i = 0; i < m; ++i)
        for (int64_t r = 0; r < rows; ++r) y[i * n + j + r] += bias[j + r];
    }
  }
}
#else
bool have_blas() { return false; }

void gemm_nt_rows_blas(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                       int64_t n_end) {
  gemm_nt_rows_portable(x, w, bias, y, m, n_begin, n_end);
}
#endif

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

namespace {

// data[(b * k + t) * block_rows + l] = x[b * block_rows + l, t]; blocks split over the pool.
void pack_x(const float* x, int m, int64_t k, int block_rows, float* out, ThreadPool& pool) {
  const int blocks = (m + block_rows - 1) / block_rows;
  auto pack_block = [&](int b) {
    float* dst = out + static_cast<int64_t>(b) * k * block_rows;
    const int rows = std::min(block_rows, m - b * block_rows);
    for (int l = 0; l < rows; ++l) {
      const float* src = x + static_cast<int64_t>(b * block_rows + l) * k;
      for (int64_t t = 0; t < k; ++t) dst[t * block_rows + l] = src[t];
    }
    for (int l = rows; l < block_rows; ++l)
      for (int64_t t = 0; t < k; ++t) dst[t * block_rows + l] = 0.0f;
  };
  if (static_cast<int64_t>(m) * k < (1 << 16)) {
    for (int b = 0; b < blocks; ++b) pack_block(b);
  } else {
    pool.parallel_for(blocks, pack_block);
  }
}

// x rounded to bf16 as f32 values (this thread's storage, valid until its next call): for the FMA kernels under amx.
const float* bf16_rounded(const float* x, int m, int64_t k) {
  thread_local std::vector<float> storage;
  storage.resize(static_cast<size_t>(m) * static_cast<size_t>(k));
  round_to_bf16_avx512(x, static_cast<int64_t>(m) * k, storage.data());
  return storage.data();
}

// x rounded to bf16 pairs for the AVX512-BF16 products, in this thread's buffer (valid until its next call).
Bf16Rows bf16_rows(const float* x, int m, int64_t k) {
  thread_local std::vector<uint32_t> storage;
  const int64_t pairs = (k + 1) / 2;
  storage.resize(static_cast<size_t>(m) * static_cast<size_t>(pairs));
  to_bf16_pairs(x, m, k, storage.data());
  return Bf16Rows{storage.data(), m, pairs};
}

// Quantized weights: int8 activations on every x86 ISA, through VNNI where the CPU has it (AVX512-VNNI from avx512
// on, AVX-VNNI on avx2) and vpmaddubsw + vpmaddwd where not; f32 activations on the portable kernel.
using QuantizedKernel = void (*)(const QuantizedX&, const WeightMatrix&, const float*, float*, int64_t, int64_t,
                                 int64_t);
QuantizedKernel quantized_kernel(Isa isa) {
  const bool vnni = vnni_products(isa);
  if (isa >= Isa::avx512) return vnni ? &gemm_nt_quantized_avx512_vnni : &gemm_nt_quantized_avx512_int8;
  if (isa == Isa::avx2) return vnni ? &gemm_nt_quantized_avx_vnni : &gemm_nt_quantized_avx2_int8;
  return &gemm_nt_quantized_portable;
}
QuantizedX quantized_x(const float* x, int m, const WeightMatrix& w, Isa isa, int slot) {
  return quantized_int8_activations(isa) ? quantized_x_int8(x, m, w, slot) : quantized_x_f32(x, m, w, slot);
}

}  // namespace

bool quantized_int8_activations(Isa isa) {
  if (isa == Isa::automatic) isa = automatic_isa();
  return isa >= Isa::avx2;
}

void gemm_nt_glu(const float* x, const WeightMatrix& gate_up, int64_t ff, float* y, int m, ThreadPool& pool,
                 Isa isa) {
  ACTORD_CHECK(gate_up.layout != WeightLayout::row_major);
  if (m <= 0) return;
  if (isa == Isa::automatic) isa = automatic_isa();
  const int64_t rows[] = {gate_up.rows};
  const std::vector<RowTask>& tasks = split_row_tasks(rows, m, gate_up.cols, kBlockCols, kBlockCols, pool.size());
  const int n_tasks = static_cast<int>(tasks.size());
  const ProductPath path = product_path(isa, m, gate_up);
  if (gate_up.layout == WeightLayout::quantized) {
    const QuantizedX xq = quantized_x(x, m, gate_up, isa, 0);
    const QuantizedKernel run = quantized_kernel(isa);
    const AmxQuantizedX xa = path == ProductPath::int8_tiles ? amx_quantized_x(xq, 0) : AmxQuantizedX{};
    pool.parallel_for(n_tasks, [&](int t) {
      if (xa.x) gemm_nt_quantized_amx(xa, gate_up, nullptr, y, ff, tasks[t].begin, tasks[t].end);
      else run(xq, gate_up, nullptr, y, ff, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  if (path == ProductPath::bf16_tiles) {
    const AmxRows xa = amx_rows(x, m, gate_up.cols);
    pool.parallel_for(n_tasks, [&](int t) {
      gemm_nt_glu_amx(xa, gate_up, ff, y, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  if (path == ProductPath::bf16_fma) {
    const float* xr = bf16_rounded(x, m, gate_up.cols);
    pool.parallel_for(n_tasks, [&](int t) {
      gemm_nt_glu_avx512(xr, m, gate_up, ff, y, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  if (path == ProductPath::bf16_dot) {
    const Bf16Rows xb = bf16_rows(x, m, gate_up.cols);
    pool.parallel_for(n_tasks, [&](int t) {
      gemm_nt_glu_avx512_bf16(xb, gate_up, ff, y, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  auto run = isa >= Isa::avx512 ? &gemm_nt_glu_avx512 : isa == Isa::avx2 ? &gemm_nt_glu_avx2 : &gemm_nt_glu_portable;
  pool.parallel_for(n_tasks, [&](int t) {
    run(x, m, gate_up, ff, y, tasks[t].begin, tasks[t].end);
  });
}

void gemm_nt(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, ThreadPool& pool,
             GemmPath path) {
  const GemmOutput out{&w, bias, y};
  gemm_nt_multi(x, &out, 1, m, pool, path);
}

void gemm_nt_multi(const float* x, const GemmOutput* outputs, int n_outputs, int m, ThreadPool& pool,
                   GemmPath path) {
  if (n_outputs <= 0 || m <= 0) return;
  const int64_t k = outputs[0].w->cols;
  const WeightLayout layout = outputs[0].w->layout;
  const bool blocked = layout != WeightLayout::row_major;
  for (int o = 1; o < n_outputs; ++o) ACTORD_CHECK(outputs[o].w->cols == k);
  for (int o = 1; o < n_outputs; ++o) {
    if (outputs[o].w->layout != layout) {  // a GGUF file may keep v in F16 beside quantized q and k: one by one
      for (int p = 0; p < n_outputs; ++p) gemm_nt_multi(x, outputs + p, 1, m, pool, path);
      return;
    }
  }
  Isa isa = path.isa == Isa::automatic ? automatic_isa() : path.isa;
  Kernel kernel = path.kernel;
  if (blocked) {
    kernel = Kernel::automatic;  // one kernel family serves every m on blocked weights
  } else if (kernel == Kernel::automatic) {
    kernel = m >= blas_min_rows(isa) && have_blas() ? Kernel::blas
             : m >= packed_min_rows(isa)             ? Kernel::packed
                                                     : Kernel::rows;
  }
  if (kernel == Kernel::packed && isa == Isa::portable) kernel = Kernel::rows;

  // Each output's rows go in guided chunks (row_tasks.hpp) of whole register blocks of weight rows (24 covers every
  // packed shape; 4 the rows kernels).
  const int64_t granule = blocked ? kBlockCols : kernel == Kernel::packed ? 24 : 4;
  int64_t rows[8];
  ACTORD_CHECK(n_outputs <= 8);
  for (int o = 0; o < n_outputs; ++o) rows[o] = outputs[o].w->rows;
  const std::vector<RowTask>& tasks = split_row_tasks(std::span<const int64_t>(rows, n_outputs), m, k, granule,
                                                      blocked ? granule : 16, pool.size());
  const int n_tasks = static_cast<int>(tasks.size());

  if (layout == WeightLayout::quantized) {
    // x prepared once per distinct grouping of the outputs (q, k and v share one).
    QuantizedX prepared[8];
    for (int o = 0; o < n_outputs; ++o) {
      int same = 0;
      while (same < o && outputs[same].w->quant.group != outputs[o].w->quant.group) ++same;
      prepared[o] = same < o ? prepared[same] : quantized_x(x, m, *outputs[o].w, isa, o);
    }
    const QuantizedKernel run = quantized_kernel(isa);
    AmxQuantizedX tiled[8];  // codes on the tiles (product_path)
    for (int o = 0; o < n_outputs; ++o)
      if (product_path(isa, m, *outputs[o].w) == ProductPath::int8_tiles) tiled[o] = amx_quantized_x(prepared[o], o);
    pool.parallel_for(n_tasks, [&](int t) {
      const GemmOutput& o = outputs[tasks[t].output];
      if (tiled[tasks[t].output].x) gemm_nt_quantized_amx(tiled[tasks[t].output], *o.w, o.bias, o.y, 0, tasks[t].begin, tasks[t].end);
      else run(prepared[tasks[t].output], *o.w, o.bias, o.y, 0, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  if (blocked && bf16_dot_products(isa)) {
    // bf16 weights along their product_path (x rounded once, for the tiles, vdpbf16ps or FMA), others as avx512.
    ProductPath bf16_path = ProductPath::f32_fma;  // the same for every bf16 output (blocked, these rows, this isa)
    for (int o = 0; o < n_outputs && bf16_path == ProductPath::f32_fma; ++o)
      if (outputs[o].w->dtype == DType::bf16) bf16_path = product_path(isa, m, *outputs[o].w);
    const bool tiles = bf16_path == ProductPath::bf16_tiles;
    const bool fma = bf16_path == ProductPath::bf16_fma;
    const Bf16Rows xb = bf16_path == ProductPath::bf16_dot ? bf16_rows(x, m, k) : Bf16Rows{};
    const AmxRows xa = tiles ? amx_rows(x, m, k) : AmxRows{};
    const float* xr = fma ? bf16_rounded(x, m, k) : nullptr;
    pool.parallel_for(n_tasks, [&](int t) {
      const GemmOutput& o = outputs[tasks[t].output];
      if (o.w->dtype != DType::bf16) gemm_nt_blocked_avx512(x, m, *o.w, o.bias, o.y, tasks[t].begin, tasks[t].end);
      else if (tiles) gemm_nt_blocked_amx(xa, *o.w, o.bias, o.y, tasks[t].begin, tasks[t].end);
      else if (fma) gemm_nt_blocked_avx512(xr, m, *o.w, o.bias, o.y, tasks[t].begin, tasks[t].end);
      else gemm_nt_blocked_avx512_bf16(xb, *o.w, o.bias, o.y, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  if (blocked) {
    auto run = isa >= Isa::avx512 ? &gemm_nt_blocked_avx512
               : isa == Isa::avx2 ? &gemm_nt_blocked_avx2
                                  : &gemm_nt_blocked_portable;
    pool.parallel_for(n_tasks, [&](int t) {
      const GemmOutput& o = outputs[tasks[t].output];
      run(x, m, *o.w, o.bias, o.y, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  if (kernel == Kernel::packed) {
    const int block_rows = isa >= Isa::avx512 ? packed_block_rows_avx512(m) : packed_block_rows_avx2(m);
    const int blocks = (m + block_rows - 1) / block_rows;
    thread_local aligned_vector<float> packed;
    packed.resize(static_cast<size_t>(blocks) * block_rows * k);
    pack_x(x, m, k, block_rows, packed.data(), pool);
    const PackedX px{packed.data(), m, k, block_rows};
    auto run = isa >= Isa::avx512 ? &gemm_nt_packed_avx512 : &gemm_nt_packed_avx2;
    pool.parallel_for(n_tasks, [&](int t) {
      const GemmOutput& o = outputs[tasks[t].output];
      run(px, *o.w, o.bias, o.y, tasks[t].begin, tasks[t].end);
    });
    return;
  }
  auto run = &gemm_nt_rows_portable;
  if (kernel == Kernel::blas) run = &gemm_nt_rows_blas;
  else if (isa == Isa::avx2) run = &gemm_nt_rows_avx2;
  else if (isa >= Isa::avx512) run = &gemm_nt_rows_avx512;
  pool.parallel_for(n_tasks, [&](int t) {
    const GemmOutput& o = outputs[tasks[t].output];
    run(x, *o.w, o.bias, o.y, m, tasks[t].begin, tasks[t].end);
  });
}

}  // namespace actord::cpu
