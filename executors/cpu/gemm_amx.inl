// The blocked GEMM on bf16 weights through AMX tiles (TDPBF16PS), written once over a Tiles policy: the hardware's
// tile instructions (gemm_amx.cpp, compiled with -mamx-tile -mamx-bf16) or an emulation of them in C++ that follows
// the Intel SDM's definitions (gemm_amx_emulated.cpp), so that the repacking and the loops below are tested on CPUs
// without AMX; only the Tiles policy differs between the two.
//
// Tiles (palette 1, eight registers, each 16 rows of 64 bytes): C tiles 0..3 hold f32 [16 rows][16 columns] sums, A
// tiles 4, 5 x as bf16 pairs [16 rows][16 pairs: 32 input features], B tiles 6, 7 the weights as [16 pairs of input
// features][16 columns] dwords, each (feature 2p in its low half, 2p + 1 in its high half): TDPBF16PS adds
// A[m][p].lo * B[p][n].lo + A[m][p].hi * B[p][n].hi over p to C[m][n], products exact, sums in f32.
//
// A weight block (blocked_weights.hpp) stores, per input feature t, 16 dwords, dword l = (column l in its high half,
// column 16 + l in its low half). Per block the two B operands are made once into this thread's scratch: for columns
// 0..15 dword (p, l) = (P[2p][l] >> 16) | (P[2p + 1][l] & 0xFFFF0000), for columns 16..31 (P[2p][l] & 0xFFFF) |
// (P[2p + 1][l] << 16) (the pairs the AVX512-BF16 kernel makes in registers), zero pairs past the features. Then every
// 32 rows of x (two A tiles) meet the block in 4 C tiles, 32 features per step; the sums go through a 32 x 32 f32
// scratch to the outputs (+ bias, or silu(gate) * up for a pack_glu block). x comes padded (AmxRows: rows and pairs
// to multiples of 16, zeros), so tiles always read whole.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu::amx_detail {

constexpr int kTileRows = 16;
constexpr int kTileBytes = 64;  // per row: 16 f32, 16 dwords of bf16 pairs

// B operands of one weight block: [pairs][16 dwords] for columns 0..15, then the same for columns 16..31.
inline void make_b_operands(const unsigned char* block, int64_t k, int64_t padded_pairs, uint32_t* lo, uint32_t* hi) {
  const auto* words = reinterpret_cast<const uint32_t*>(block);  // [k][16]
  const int64_t pairs = (k + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const uint32_t* p0 = words + 2 * p * 16;
    const bool odd = 2 * p + 1 < k;
    for (int l = 0; l < 16; ++l) {
      const uint32_t w0 = p0[l], w1 = odd ? p0[16 + l] : 0u;
      lo[p * 16 + l] = (w0 >> 16) | (w1 & 0xFFFF0000u);
      hi[p * 16 + l] = (w0 & 0xFFFFu) | (w1 << 16);
    }
  }
  std::fill(lo + pairs * 16, lo + padded_pairs * 16, 0u);
  std::fill(hi + pairs * 16, hi + padded_pairs * 16, 0u);
}

template <class Tiles, bool kGlu>
void product(const AmxRows& x, const WeightMatrix& w, const float* bias, float* y, int64_t ldy, int64_t outputs,
             int64_t n_begin, int64_t n_end) {
  constexpr int kOutsPerBlock = kGlu ? kBlockCols / 2 : kBlockCols;
  const int64_t k = w.cols, kp = x.padded_pairs;
  const int64_t block_bytes = k * kBlockCols * 2;
  const int64_t x_stride = kp * 4;
  const auto* base = static_cast<const unsigned char*>(w.data);
  thread_local std::vector<uint32_t> operands;
  operands.resize(static_cast<size_t>(2 * kp * 16));
  uint32_t* lo = operands.data();
  uint32_t* hi = lo + kp * 16;
  alignas(64) float sums[2 * kTileRows][kBlockCols];
  Tiles::configure();
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    make_b_operands(base + (j0 / kBlockCols) * block_bytes, k, kp, lo, hi);
    const int64_t out0 = j0 / kBlockCols * kOutsPerBlock;
    const int outs = static_cast<int>(std::min<int64_t>(kOutsPerBlock, outputs - out0));
    for (int i = 0; i < x.m; i += 2 * kTileRows) {
      const bool two = i + kTileRows < x.padded_rows;  // a second A tile of rows (the rows are padded to 16)
      const auto* a0 = reinterpret_cast<const unsigned char*>(x.data + static_cast<int64_t>(i) * kp);
      Tiles::template zero<0>();
      Tiles::template zero<1>();
      if (two) {
        Tiles::template zero<2>();
        Tiles::template zero<3>();
      }
      for (int64_t p = 0; p < kp; p += kTileRows) {
        Tiles::template load<4>(a0 + p * 4, x_stride);
        Tiles::template load<6>(lo + p * 16, kTileBytes);
        Tiles::template load<7>(hi + p * 16, kTileBytes);
        Tiles::template dot<0, 4, 6>();
        Tiles::template dot<1, 4, 7>();
        if (two) {
          Tiles::template load<5>(a0 + kTileRows * x_stride + p * 4, x_stride);
          Tiles::template dot<2, 5, 6>();
          Tiles::template dot<3, 5, 7>();
        }
      }
      Tiles::template store<0>(&sums[0][0], sizeof(sums[0]));
      Tiles::template store<1>(&sums[0][16], sizeof(sums[0]));
      if (two) {
        Tiles::template store<2>(&sums[kTileRows][0], sizeof(sums[0]));
        Tiles::template store<3>(&sums[kTileRows][16], sizeof(sums[0]));
      }
      const int rows = std::min(x.m - i, two ? 2 * kTileRows : kTileRows);
      for (int r = 0; r < rows; ++r) {
        float* yr = y + static_cast<int64_t>(i + r) * ldy + out0;
        const float* s = sums[r];
        for (int c = 0; c < outs; ++c) yr[c] = kGlu ? silu(s[c]) * s[16 + c] : s[c] + (bias ? bias[j0 + c] : 0.0f);
      }
    }
  }
}

}  // namespace actord::cpu::amx_detail
