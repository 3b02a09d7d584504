// gemm_amx.inl over tiles emulated in C++ as the Intel SDM defines them (TILELOADD, TILESTORED, TILEZERO,
// TDPBF16PS: for each row m, pair p, column n, C[m][n] += f32(A[m][p].lo) * f32(B[p][n].lo) +
// f32(A[m][p].hi) * f32(B[p][n].hi)), so that the repacking and loops the hardware runs are checked on any CPU.
#include <cstring>

#include "core/dtype.hpp"
#include "executors/cpu/gemm_amx.inl"

namespace actord::cpu {
namespace {

struct EmulatedTiles {
  struct Tile {
    alignas(64) unsigned char bytes[amx_detail::kTileRows * amx_detail::kTileBytes];
  };
  struct Shape {
    int rows = amx_detail::kTileRows, colsb = amx_detail::kTileBytes;
  };
  static Tile& tile(int t) {
    thread_local Tile tiles[8];
    return tiles[t];
  }
  static Shape& shape(int t) {
    thread_local Shape shapes[8];
    return shapes[t];
  }
  // The per-block work beside the tiles, scalar (amx_block_ops.hpp).
  static constexpr auto make_b_operands = amx_detail::make_b_operands;
  static constexpr auto unpack_nibble_chunks = amx_detail::unpack_nibble_chunks;
  static constexpr auto add_group_sums = amx_detail::add_group_sums;
  static constexpr auto write_sums = amx_detail::write_sums;
  static void configure(int a_colsb, int b_rows) {
    for (int t = 0; t < 8; ++t) shape(t) = Shape{};
    shape(4).colsb = shape(5).colsb = a_colsb;
    shape(6).rows = shape(7).rows = b_rows;
  }
  static void release() {}
  template <int T>
  static void zero() {
    std::memset(tile(T).bytes, 0, sizeof(Tile::bytes));
  }
  // TILELOADD: rows x colsb bytes, the rest of the register zeroed; TILESTORED: rows x colsb bytes.
  template <int T>
  static void load(const void* p, int64_t stride) {
    std::memset(tile(T).bytes, 0, sizeof(Tile::bytes));
    for (int r = 0; r < shape(T).rows; ++r)
      std::memcpy(tile(T).bytes + r * amx_detail::kTileBytes, static_cast<const unsigned char*>(p) + r * stride,
                  static_cast<size_t>(shape(T).colsb));
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    for (int r = 0; r < shape(T).rows; ++r)
      std::memcpy(static_cast<unsigned char*>(p) + r * stride, tile(T).bytes + r * amx_detail::kTileBytes,
                  static_cast<size_t>(shape(T).colsb));
  }
  // TDPBSUD: C[m][n] (int32) += sum over k < colsb(A) / 4 and j < 4 of int8 A[m][4k + j] * uint8 B[k][4n + j].
  template <int C, int A, int B>
  static void dot_s8u8() {
    auto* c = reinterpret_cast<int32_t*>(tile(C).bytes);
    const auto* a = reinterpret_cast<const int8_t*>(tile(A).bytes);
    const auto* b = tile(B).bytes;
    const int quads = shape(A).colsb / 4;
    for (int m = 0; m < amx_detail::kTileRows; ++m) {
      for (int n = 0; n < 16; ++n) {
        int32_t sum = c[m * 16 + n];
        for (int k = 0; k < quads; ++k)
          for (int j = 0; j < 4; ++j)
            sum += int32_t(a[m * amx_detail::kTileBytes + 4 * k + j]) * int32_t(b[k * amx_detail::kTileBytes + 4 * n + j]);
        c[m * 16 + n] = sum;
      }
    }
  }
  template <int C, int A, int B>
  static void dot() {
    auto* c = reinterpret_cast<float*>(tile(C).bytes);
    const auto* a = reinterpret_cast<const uint32_t*>(tile(A).bytes);
    const auto* b = reinterpret_cast<const uint32_t*>(tile(B).bytes);
    constexpr int n16 = amx_detail::kTileBytes / 4;
    const int pairs = shape(A).colsb / 4;
    for (int m = 0; m < amx_detail::kTileRows; ++m) {
      for (int p = 0; p < pairs; ++p) {
        const uint32_t ap = a[m * n16 + p];
        const float a_lo = bf16_to_f32(static_cast<uint16_t>(ap)), a_hi = bf16_to_f32(static_cast<uint16_t>(ap >> 16));
        for (int n = 0; n < n16; ++n) {
          const uint32_t bp = b[p * n16 + n];
          float sum = c[m * n16 + n];
          sum += a_lo * bf16_to_f32(static_cast<uint16_t>(bp));
          sum += a_hi * bf16_to_f32(static_cast<uint16_t>(bp >> 16));
          c[m * n16 + n] = sum;
        }
      }
    }
  }
};

}  // namespace

void gemm_nt_blocked_amx_emulated(const AmxRows& x, const WeightMatrix& w, const float* bias, float* y,
                                  int64_t n_begin, int64_t n_end) {
  amx_detail::product<EmulatedTiles, false>(x, w, bias, y, w.rows, w.rows, n_begin, n_end);
}

void gemm_nt_glu_amx_emulated(const AmxRows& x, const WeightMatrix& w, int64_t ff, float* y, int64_t n_begin,
                              int64_t n_end) {
  amx_detail::product<EmulatedTiles, true>(x, w, nullptr, y, ff, ff, n_begin, n_end);
}

void gemm_nt_quantized_amx_emulated(const AmxQuantizedX& x, const WeightMatrix& w, const float* bias, float* y,
                                    int64_t ff_glu, int64_t n_begin, int64_t n_end) {
  if (ff_glu > 0) amx_detail::product_int8<EmulatedTiles, true>(x, w, nullptr, y, ff_glu, ff_glu, n_begin, n_end);
  else amx_detail::product_int8<EmulatedTiles, false>(x, w, bias, y, w.rows, w.rows, n_begin, n_end);
}

}  // namespace actord::cpu
