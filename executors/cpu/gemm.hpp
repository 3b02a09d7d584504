// Matrix products against weights that stay in their stored dtype (f32, bf16 or f16), converted to f32 in
// registers on the fly: a bf16 model keeps its bf16 footprint in memory.
//
// Contract: y[m, n] = x[m, k] · W[n, k]^T (+ bias[n]), the HF Linear layout (a weight row is an output feature).
// x and y are dense f32, row-major. W is either blocked (rearranged at load time, blocked_weights.hpp: what models
// use; one kernel family for every m) or row-major with rows `row_stride` elements apart (a view of a file, a TP
// slice). For row-major W, few rows of x (decode: memory-bound) stream each weight row once against all rows of x,
// many (prefill: compute-bound) pack x and multiply register blocks of outer products, or OpenBLAS sgemm on
// converted panels (see Kernel). Every kernel has AVX2/FMA/F16C and AVX-512 versions chosen at run time, portable
// C++ otherwise; the n output features are split over the pool. All accumulate in f32 and differ from the
// double-precision reference only by rounding.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.hpp"
#include "core/status.hpp"

namespace actord::cpu {

class ThreadPool;

// How a matrix's values are arranged: row_major ([rows, row_stride], the file's layout), blocked (rearranged at
// load time for the GEMM: see blocked_weights.hpp; row() and row_stride do not apply) or quantized (integer codes
// with scales, blocked likewise: quantized_weights.hpp).
enum class WeightLayout { row_major, blocked, quantized };

// The codes of a quantized matrix: bits per code (8 or 4), values per scale along a row, and whether offsets are
// stored (else offset = -zero * scale, zero = 128 or 8).
struct WeightQuant {
  int bits = 0;
  int group = 0;
  bool affine = false;
};

struct WeightMatrix {
  DType dtype = DType::f32;
  const void* data = nullptr;  // [rows, row_stride] elements of dtype when row_major
  int64_t rows = 0;            // output features (n)
  int64_t cols = 0;            // input features (k)
  int64_t row_stride = 0;      // elements between rows; 0 means cols
  int64_t stride() const { return row_stride ? row_stride : cols; }
  WeightLayout layout = WeightLayout::row_major;
  WeightQuant quant = {};  // layout quantized only
  const unsigned char* row(int64_t r) const {  // row_major only
    return static_cast<const unsigned char*>(data) + r * stride() * static_cast<int64_t>(dtype_size(dtype));
  }
};

// Which instruction set runs a product. `automatic` is the best this CPU runs (detected_isa()); the others force one
// (a worker's groups[i].cpu_isa, tests, benchmarks). A forced ISA the CPU lacks is not checked here: resolve a
// requested one with isa_for() first.
// avx512_bf16 is avx512 except for products with bf16 weights on blocked layout: their activations are rounded to
// bf16 and multiplied with AVX512-BF16 dot products (vdpbf16ps, f32 sums), as HF, vLLM and llama.cpp compute bf16
// models on CPUs: what automatic is on a CPU that has the instructions (groups[].cpu_isa: avx512 keeps f32
// activations). amx is avx512_bf16 whose products of kAmxMinRows rows or more run on AMX tiles (TDPBF16PS: the
// same bf16 inputs, f32 sums): automatic on a CPU where amx_ready().
enum class Isa { automatic, portable, avx2, avx512, avx512_bf16, amx };
// Whether bf16 weights multiply bf16-rounded activations under `isa` (avx512_bf16, amx).
inline bool bf16_dot_products(Isa isa) { return isa == Isa::avx512_bf16 || isa == Isa::amx; }
// Which algorithm: `rows` takes dot products of x rows with weight rows (few rows of x: decode, memory-bound);
// `packed` packs x k-major and takes outer products with an f32 panel of weights converted once (many rows:
// compute-bound); `blas` is OpenBLAS sgemm on converted weight panels. `automatic` picks by m (packed_min_rows(),
// blas_min_rows()). portable runs `rows` whatever is asked, except blas.
enum class Kernel { automatic, rows, packed, blas };
struct GemmPath {
  Isa isa = Isa::automatic;
  Kernel kernel = Kernel::automatic;
};
// From this many rows of x on, automatic picks `packed` (measured with bench/gemm_bench.cpp).
int packed_min_rows(Isa cpu_isa);
// From this many rows on, automatic picks OpenBLAS; a very large number when the packed kernel wins everywhere.
int blas_min_rows(Isa cpu_isa);
bool have_blas();         // whether this build links OpenBLAS and the one loaded tolerates concurrent callers
Isa detected_isa();       // avx512, avx2 or portable: what this CPU supports, checked once
Isa automatic_isa();      // what automatic resolves to: detected_isa(), or amx / avx512_bf16 (bf16_dot_beats_fma)
bool cpu_has_avx512_bf16();  // AVX512-BF16 (vdpbf16ps), with avx512
// AVX512-VNNI (vpdpbusd), with avx512; AVX-VNNI (256-bit vpdpbusd), with avx2 (both less ACTORD_CPU_HIDE's).
bool cpu_has_avx512_vnni();
bool cpu_has_avx_vnni();
// Whether the int8 products of quantized weights under `isa` (automatic resolved) take vpdpbusd: AVX512-VNNI from
// avx512 on, AVX-VNNI on avx2; else vpmaddubsw + vpmaddwd (quantized_weights.hpp).
bool vnni_products(Isa isa);
const char* isa_name(Isa isa);
// The Isa of a configuration name: auto (automatic), portable, avx2, avx512, avx512_bf16; nullopt for any other.
std::optional<Isa> parse_isa(std::string_view name);
// `requested` resolved on a CPU that runs `cpu` at best (this one's by default): automatic becomes `cpu`; an ISA
// `cpu` lacks (avx512 on an AVX2 machine, avx2 or avx512 on a portable one) is Errc::unsupported, naming both.
Result<Isa> isa_for(Isa requested, Isa cpu = detected_isa());
// The same for a configuration name; an unknown name is Errc::invalid_config listing the known ones.
Result<Isa> isa_for(std::string_view name, Isa cpu = detected_isa());
const char* kernel_name(Kernel kernel);

// x packed for the `packed` kernel: ceil(m / block_rows) blocks, block b holding rows [b * block_rows, +block_rows)
// k-major: data[(b * k + t) * block_rows + l] = x[b * block_rows + l, t], zero past row m.
struct PackedX {
  const float* data = nullptr;
  int m = 0;
  int64_t k = 0;
  int block_rows = 0;
};

void gemm_nt(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, ThreadPool& pool,
             GemmPath path = {});

// One product of a multi-output GEMM: y [m, w.rows] = x W^T (+ bias).
struct GemmOutput {
  const WeightMatrix* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
};
// Several products of the same x (q/k/v, gate/up), each equal to gemm_nt(x, *o.w, o.bias, o.y, m, pool, path): at
// most 8 outputs; every weight must have x's width (w.cols); weights of different layouts (quantized beside float)
// go one by one. x is packed once and all the outputs' row chunks share one parallel_for, which saves a pool wake-up
// and a pass over x per extra output.
void gemm_nt_multi(const float* x, const GemmOutput* outputs, int n_outputs, int m, ThreadPool& pool,
                   GemmPath path = {});

// out[r * w.cols + c] = W[row_begin + r, c] as f32, for `rows` rows (vectorised where the CPU allows).
void convert_rows_to_f32(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out);
void convert_rows_to_f32_avx2(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out);
void convert_rows_to_f32_avx512(const WeightMatrix& w, int64_t row_begin, int64_t rows, float* out);

// Per-ISA kernels over output features [n_begin, n_end); internal to gemm.cpp and its tests.
void gemm_nt_rows_portable(const float* x, const WeightMatrix& w, const float* bias, float* y, int m,
                           int64_t n_begin, int64_t n_end);
void gemm_nt_rows_avx2(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                       int64_t n_end);
void gemm_nt_rows_avx512(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                         int64_t n_end);
// Block sizes of the packed kernel: rows of x per block for an m-row product, and the packed kernels themselves.
int packed_block_rows_avx2(int m);
int packed_block_rows_avx512(int m);
void gemm_nt_packed_avx2(const PackedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                         int64_t n_end);
void gemm_nt_packed_avx512(const PackedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                           int64_t n_end);
void gemm_nt_rows_blas(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                       int64_t n_end);
// Rows of x rounded to bf16 (to nearest even), pairs of input features per 32-bit word (the low half the even one):
// data[i * pairs + p] holds x[i, 2p] and x[i, 2p + 1] (0 past k). to_bf16_pairs fills m rows of k.
struct Bf16Rows {
  const uint32_t* data = nullptr;
  int m = 0;
  int64_t pairs = 0;  // (k + 1) / 2
};
void to_bf16_pairs(const float* x, int m, int64_t k, uint32_t* out);
// The blocked products on bf16 weights with AVX512-BF16 dot products (gemm_avx512_bf16.cpp).
// x rounded to bf16 (to nearest even, as to_bf16_pairs rounds) and back to f32: n values (AVX512-BF16).
void round_to_bf16_avx512(const float* x, int64_t n, float* out);
// `iterations` rounds of 16 independent vdpbf16ps chains (AVX512-BF16: kBf16DotChainMacs multiply-adds a round) or
// FMA ones (AVX-512: kFmaChainMacs), nothing loaded: timed, the instructions' own rates. Returns a sink.
constexpr double kBf16DotChainMacs = 16 * 32, kFmaChainMacs = 16 * 16;
float bf16_dot_chains(long iterations);
float fma_chains(long iterations);
// Whether vdpbf16ps beats FMA per multiply-add here (measured once: the better of 3 rounds of each, vdpbf16ps kept at
// 1.25x FMA's rate or more). Under amx, products below kAmxMinRows rows of bf16 weights take vdpbf16ps where it does,
// elsewhere the f32 FMA kernel on x rounded to bf16 (the same products, exact in f32); without AMX, auto is
// avx512_bf16 where it does and avx512 (f32 activations) where not. On the Intel Xeons measured (2 threads)
// vdpbf16ps chains gave 84-87 GMAC/s against FMA's 173-176 (one vdpbf16ps, 32 multiply-adds, issued at a quarter of
// FMA's rate, 16); on Zen 4 the vdpbf16ps kernel was 1.6-1.9x the FMA one.
bool bf16_dot_beats_fma();
void gemm_nt_blocked_avx512_bf16(const Bf16Rows& x, const WeightMatrix& w, const float* bias, float* y,
                                 int64_t n_begin, int64_t n_end);
void gemm_nt_glu_avx512_bf16(const Bf16Rows& x, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                             int64_t n_end);

// AMX (gemm_amx.inl): x as bf16 pairs (as Bf16Rows), each row's pairs padded with zeros to a multiple of 16 (a
// tile's 32 features) and the rows to a multiple of 16 (zero rows), so that tiles read whole.
struct AmxRows {
  const uint32_t* data = nullptr;  // [padded_rows][row_pairs]
  int m = 0;                       // rows of x
  int padded_rows = 0;             // m rounded up to 16
  int64_t padded_pairs = 0;        // (k + 1) / 2 rounded up to 16
  // From one row to the next: padded_pairs, plus 16 (a cache line) where padded_pairs / 16 is even, so that a
  // tile's 16 rows fall into 16 different L1 sets (4 KiB apart, as at k = 2048, they all fell into one: the
  // products of that k ran at 60% of the rate of k = 768 ones on the AMX Xeon measured).
  int64_t row_pairs = 0;
};
// The shape for m rows of `pairs` pairs (data null).
AmxRows amx_rows_shape(int m, int64_t pairs);
// Fills shape.padded_rows rows of shape.row_pairs pairs at `out`: the first shape.m from x's rows of k features
// rounded to bf16 pairs (as to_bf16_pairs), zeros everywhere else. One pass, what the dispatch runs.
void to_amx_rows(const float* x, int64_t k, uint32_t* out, const AmxRows& shape);
// From this many rows of x on, amx multiplies bf16 weights (and 8-bit codes: int8_tiles) on the tiles; fewer take
// vdpbf16ps or FMA (bf16_dot_beats_fma). On the AMX Xeon measured (2 threads, the decode step's products of
// the ~134M Llama, 3 alternated runs): tiles 14.4-15.9 ms against FMA's 17.5-29 at 16 rows, 13.0-15.3 against
// 12.3-14.1 at 12, 12.2-14.8 against 10.1-13.7 at 8.
constexpr int kAmxMinRows = 16;
// The CPU has AMX-TILE and AMX-BF16, the kernel let this process use the tile registers (arch_prctl
// ARCH_REQ_XCOMP_PERM), and a probe product on tiles agreed with the AVX512-BF16 kernel; checked once.
bool amx_ready();
const char* amx_status();  // "ready", or why not
void gemm_nt_blocked_amx(const AmxRows& x, const WeightMatrix& w, const float* bias, float* y, int64_t n_begin,
                         int64_t n_end);
void gemm_nt_glu_amx(const AmxRows& x, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin, int64_t n_end);
// Quantized weights of 8-bit codes times int8 activations (QuantizedX of quantized_x_int8) on TDPBSUD tiles: codes
// holds x's int8 rows padded with zero rows to padded_rows (a multiple of 16). amx_int8_ready(): amx_ready(), the CPU
// has AMX-INT8, and a probe product agreed with the AVX512-VNNI kernel.
struct QuantizedX;
struct AmxQuantizedX {
  const QuantizedX* x = nullptr;
  const int8_t* codes = nullptr;  // [padded_rows][ld]
  int padded_rows = 0;
  // Bytes from one row to the next: x->ld rounded up to whole cache lines, an odd number of them (as AmxRows).
  int64_t ld = 0;
};
// xq's codes for the tiles, padded with zero rows to a multiple of 16, in this thread's buffer `slot` (0..7: valid
// until its next call with that slot).
AmxQuantizedX amx_quantized_x(const QuantizedX& xq, int slot);
bool amx_int8_ready();
// Whether quantized weights multiply on the tiles under `isa` for m rows: amx, amx_int8_ready(), and m >= kAmxMinRows
// for 8-bit codes; for 4-bit ones m >= kAmxMinRows4Bit and groups of kAmxMinGroup4Bit features or more. Each group's
// sums leave the tiles through memory to be scaled, and 4-bit codes are unpacked per block first: in groups of 32
// (Q4_0, Q4_K, `model.quantization: int4`) the tiles lost to VNNI at every row count on the AMX Xeon measured (one
// [2048 x 768] product in cache, 2 threads, the tiles' speed over VNNI's: with offsets 0.78-0.89x at 32 rows,
// 0.82-0.89x at 128; symmetric 0.77-0.90x at 32, 0.98-1.04x at 128), in groups of 64 or 128 they win from 64 rows
// (1.01-1.27x at 64, 1.05-1.52x at 128) and tie at 32 (0.87-1.02x).
constexpr int kAmxMinRows4Bit = 64;
constexpr int kAmxMinGroup4Bit = 64;
bool int8_tiles(Isa isa, int m, const WeightMatrix& w);

// Which kernels multiply m rows of x by w under `isa`, as gemm_nt, gemm_nt_multi and
// gemm_nt_glu dispatch: the one place that says so (benchmarks and `actord info` name paths from it).
enum class ProductPath {
  f32_fma,       // f32 activations on FMA kernels (any dtype of weights; quantized codes dequantized in registers)
  bf16_fma,      // bf16-rounded activations on the FMA kernel (amx below the tiles where vdpbf16ps is slow)
  bf16_dot,      // bf16-rounded activations with vdpbf16ps (AVX512-BF16)
  bf16_tiles,    // AMX TDPBF16PS
  int8_dot,      // quantized codes x int8 activations with VNNI
  int8_pairs,    // the same with vpmaddubsw + vpmaddwd (AVX2 without VNNI)
  int8_tiles,    // AMX TDPBSUD
};
ProductPath product_path(Isa isa, int m, const WeightMatrix& w);
const char* product_path_name(ProductPath path);  // "f32 (FMA)", "bf16 (AMX)", ...
void gemm_nt_quantized_amx(const AmxQuantizedX& x, const WeightMatrix& w, const float* bias, float* y, int64_t ff_glu,
                           int64_t n_begin, int64_t n_end);
void gemm_nt_quantized_amx_emulated(const AmxQuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                    int64_t ff_glu, int64_t n_begin, int64_t n_end);
// The same loops over tiles emulated in C++ (the SDM's TDPBF16PS): tests of the packing and loops on any CPU.
void gemm_nt_blocked_amx_emulated(const AmxRows& x, const WeightMatrix& w, const float* bias, float* y,
                                  int64_t n_begin, int64_t n_end);
void gemm_nt_glu_amx_emulated(const AmxRows& x, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                              int64_t n_end);

}  // namespace actord::cpu
