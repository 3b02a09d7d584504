// Matrix products against weights that stay in their stored dtype (f32, bf16 or f16), converted to f32 in
// registers on the fly: a bf16 model keeps its bf16 footprint in memory.
//
// Contract: y[m, n] = x[m, k] · W[n, k]^T (+ bias[n]), the HF Linear layout (a weight row is an output feature).
// x and y are dense f32, row-major; W rows are `row_stride` elements apart (a TP shard may be a slice). Splits the n
// output features over the pool. With many rows of x (prefill, large batches: m >= blas_min_rows()) and OpenBLAS
// available, each task converts a panel of weight rows to f32 and calls a single-threaded OpenBLAS sgemm on it;
// otherwise (decode: memory-bound) the AVX2/FMA/F16C kernels run when the CPU has them (checked once at run time),
// portable C++ otherwise. All accumulate in f32 and differ from the double-precision reference only by rounding.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace actord::cpu {

class ThreadPool;

struct WeightMatrix {
  DType dtype = DType::f32;
  const void* data = nullptr;  // [rows, row_stride] elements of dtype
  int64_t rows = 0;            // output features (n)
  int64_t cols = 0;            // input features (k)
  int64_t row_stride = 0;      // elements between rows; 0 means cols
  int64_t stride() const { return row_stride ? row_stride : cols; }
  const unsigned char* row(int64_t r) const {
    return static_cast<const unsigned char*>(data) + r * stride() * static_cast<int64_t>(dtype_size(dtype));
  }
};

// Which code computes a product. `automatic` picks per call: blas for m >= blas_min_rows() when linked, else the best
// kernels this CPU runs. The others force one path (tests and benchmarks); blas is OpenBLAS sgemm on converted
// weight panels, not a CPU feature.
enum class Isa { automatic, portable, avx2, avx512, blas };
// From this many rows of x on, automatic picks OpenBLAS (measured with bench/gemm_bench.cpp: the 16-wide AVX-512
// tiles win up to ~32 rows, the 8-wide AVX2 ones up to ~16).
int blas_min_rows(Isa cpu_isa);
bool have_blas();         // whether this build links OpenBLAS and the one loaded tolerates concurrent callers
Isa detected_isa();       // avx512, avx2 or portable: what this CPU supports, checked once
const char* isa_name(Isa isa);

void gemm_nt(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, ThreadPool& pool,
             Isa isa = Isa::automatic);

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
void gemm_nt_rows_blas(const float* x, const WeightMatrix& w, const float* bias, float* y, int m, int64_t n_begin,
                       int64_t n_end);

}  // namespace actord::cpu
