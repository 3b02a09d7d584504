// AVX-VNNI instance of the int8-activation quantized GEMM (gemm_quantized_int8.inl): 8 columns per vector, for CPUs
// with AVX2 and AVX-VNNI but no AVX-512 (Intel Alder Lake and later client cores, Sierra Forest). Compiled with
// -mavxvnni; gemm.cpp calls it only when the CPU has it.
#include <immintrin.h>

#include "executors/cpu/gemm_quantized_int8.inl"
#include "executors/cpu/int8_vectors.inl"

namespace actord::cpu {
namespace {

struct Vnni256 : Int8Vectors256 {
  static constexpr int kDot8Offset = 0;
  // acc += u8 . s8 in acc's own register (as Vnni512's: the intrinsic made GCC 12 copy accumulators around it).
  static I dpbusd(I acc, I u8, I s8) {
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u8), "x"(s8));
    return acc;
  }
  static I dot8(I acc, I codes, I x) { return dpbusd(acc, codes, x); }
  static I dot4x2(I acc, I lo, I x_lo, I hi, I x_hi) { return dpbusd(dpbusd(acc, lo, x_lo), hi, x_hi); }
};

}  // namespace

// 16 registers: 2 rows x 2 of int32 sums and of f32 totals per half block (4 rows when a row is one group).
void gemm_nt_quantized_avx_vnni(const QuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  quantized_product::product_any<quantized_int8::Rows, Vnni256, 2, 4>(x, w, bias, y, ff_glu, n_begin, n_end);
}

}  // namespace actord::cpu
