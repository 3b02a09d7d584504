// AVX512-VNNI instance of the int8-activation quantized GEMM (gemm_quantized_int8.inl): 16 columns per vector.
// Compiled with -mavx512vnni; gemm.cpp calls it only when the CPU has it.
#include <immintrin.h>

#include "executors/cpu/gemm_quantized_int8.inl"
#include "executors/cpu/int8_vectors.inl"

namespace actord::cpu {
namespace {

struct Vnni512 : Int8Vectors512 {
  static constexpr int kDot8Offset = 0;
  // acc += u8 . s8 in acc's own register: through the intrinsic GCC 12 copied every accumulator to another
  // register and back around each vpdpbusd in the kernel's loop (two moves per product).
  static I dpbusd(I acc, I u8, I s8) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
    return acc;
  }
  static I dot8(I acc, I codes, I x) { return dpbusd(acc, codes, x); }
  static I dot4x2(I acc, I lo, I x_lo, I hi, I x_hi) { return dpbusd(dpbusd(acc, lo, x_lo), hi, x_hi); }
};

}  // namespace

// 32 registers: 6 rows x 2 of int32 sums and of f32 totals (12 rows when a row is one group).
void gemm_nt_quantized_avx512_vnni(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                   int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  quantized_product::product_any<quantized_int8::Rows, Vnni512, 6, 12>(x, w, bias, y, ff_glu, n_begin, n_end);
}

}  // namespace actord::cpu
