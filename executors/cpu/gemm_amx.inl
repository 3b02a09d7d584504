// The blocked GEMM on bf16 weights through AMX tiles (TDPBF16PS), and the quantized one of 8-bit and 4-bit codes
// with int8 activations (TDPBSUD, product_int8 below), written once over a Tiles policy: the hardware's
// tile instructions (gemm_amx.cpp, compiled with -mamx-tile -mamx-bf16) or an emulation of them in C++ that follows
// the Intel SDM's definitions (gemm_amx_emulated.cpp), so that the repacking and the loops below are tested on CPUs
// without AMX; only the Tiles policy differs between the two. The policy also does the per-block work beside the
// tiles (amx_block_ops.hpp: B operands, unpacked 4-bit codes, group sums): AVX-512 on the hardware, scalar emulated.
//
// Tiles (palette 1, eight registers, each 16 rows of 64 bytes): C tiles 0..3 hold f32 [16 rows][16 columns] sums, A
// tiles 4, 5 x as bf16 pairs [16 rows][16 pairs: 32 input features], B tiles 6, 7 the weights as [16 pairs of input
// features][16 columns] dwords, each (feature 2p in its low half, 2p + 1 in its high half): TDPBF16PS adds
// A[m][p].lo * B[p][n].lo + A[m][p].hi * B[p][n].hi over p to C[m][n], products exact, sums in f32.
//
// A weight block (blocked_weights.hpp) stores, per input feature t, 16 dwords, dword l = (column l in its high half,
// column 16 + l in its low half). Per block the two B operands go into this thread's scratch: for columns 0..15 dword
// (p, l) = (P[2p][l] >> 16) | (P[2p + 1][l] & 0xFFFF0000), for columns 16..31 (P[2p][l] & 0xFFFF) | (P[2p + 1][l] <<
// 16) (the pairs the AVX512-BF16 kernel makes in registers), zero pairs past the features. Every 32 rows of x (two A
// tiles) meet the block in 4 C tiles, 32 features per step; the first 32 rows' pass makes the operands a step ahead
// of the tiles and prefetches the weights two steps ahead (made in one pass before the tiles, the weights' reads
// stalled them: 22-25 ms per decode step at 32 rows against 14-18 so, on the AMX Xeon measured). The sums go through
// a 32 x 32 f32 scratch to the outputs (Tiles::write_sums: + bias, or silu(gate) * up for a pack_glu block; AVX-512
// on the hardware, where the baseline code of this file left the gated form at 20% of the product's time). x comes padded (AmxRows:
// rows and pairs to multiples of 16, zeros), so tiles always read whole, its rows row_pairs apart (a tile's rows in
// different L1 sets).
#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "executors/cpu/amx_block_ops.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/vector_math.hpp"

namespace actord::cpu::amx_detail {

constexpr int kTileRows = 16;
constexpr int kTileBytes = 64;  // per row: 16 f32, 16 dwords of bf16 pairs

template <class Tiles, bool kGlu>
void product(const AmxRows& x, const WeightMatrix& w, const float* bias, float* y, int64_t ldy, int64_t outputs,
             int64_t n_begin, int64_t n_end) {
  constexpr int kOutsPerBlock = kGlu ? kBlockCols / 2 : kBlockCols;
  const int64_t k = w.cols, kp = x.padded_pairs;
  const int64_t block_bytes = k * kBlockCols * 2;
  const int64_t x_stride = x.row_pairs * 4;
  constexpr int64_t kStepBytes = 2 * kTileRows * kBlockCols * 2;  // a block's bytes for the 32 features of a step
  const auto* base = static_cast<const unsigned char*>(w.data);
  thread_local std::vector<uint32_t> operands;
  operands.resize(static_cast<size_t>(2 * kp * 16));
  uint32_t* lo = operands.data();
  uint32_t* hi = lo + kp * 16;
  alignas(64) float sums[2 * kTileRows][kBlockCols];
  Tiles::configure(kTileBytes, kTileRows);
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const unsigned char* block = base + (j0 / kBlockCols) * block_bytes;
    Tiles::make_b_operands(block, k, 0, kTileRows, lo, hi);
    const int64_t out0 = j0 / kBlockCols * kOutsPerBlock;
    const int outs = static_cast<int>(std::min<int64_t>(kOutsPerBlock, outputs - out0));
    for (int i = 0; i < x.m; i += 2 * kTileRows) {
      const bool two = i + kTileRows < x.padded_rows;  // a second A tile of rows (the rows are padded to 16)
      const auto* a0 = reinterpret_cast<const unsigned char*>(x.data + static_cast<int64_t>(i) * x.row_pairs);
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
        // The first row group makes the next step's operands while the tiles work on this one's, and asks L1 for
        // the weights of the step after (past the block's end: the next block's first), so that the weights
        // stream behind the tile instructions; later row groups find the operands made.
        if (i == 0) {
          if (p + kTileRows < kp) Tiles::make_b_operands(block, k, p + kTileRows, p + 2 * kTileRows, lo, hi);
          const int64_t ahead = (p / kTileRows + 2) * kStepBytes;  // p counts pairs, 16 a step
          for (int64_t b = ahead; b < ahead + kStepBytes; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(block + b), _MM_HINT_T0);
        }
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
      Tiles::write_sums(sums, rows, outs, kGlu, bias ? bias + j0 : nullptr, y + static_cast<int64_t>(i) * ldy + out0,
                        ldy);
    }
  }
  Tiles::release();
}

// Quantized codes (quantized_weights.hpp: 8 bits symmetric around 128, 4 bits symmetric around 8 or affine) times
// int8 activations (quantized_x_int8) on TDPBSUD tiles: A the rows' signed codes [16 rows][kq bytes], B the block's
// unsigned codes as 8-bit chunks (a 128-byte chunk is one B row for columns 0..15 in its first 64 bytes and for
// 16..31 in the next: stride 128, kq / 4 rows): 8-bit codes straight from the layout, 4-bit ones unpacked once per
// block (Tiles::unpack_nibble_chunks) into this thread's scratch; C int32 sums. kq: the largest of 64, 32, 16, 8
// dividing the group stride, so that a group's steps stop at its end. Per group the sums S leave the tiles and enter
// the f32 totals as the VNNI kernel adds them (Tiles::add_group_sums: scale * (S - zero sum(q)), affine scale * S +
// offset * sum(q)); the output is s_x * total (+ bias, or the gated form).
inline int int8_step_bytes(int64_t group_stride) {
  for (int kq : {64, 32, 16, 8})
    if (group_stride % kq == 0) return kq;
  return 4;
}

template <class Tiles, bool kGlu>
void product_int8(const AmxQuantizedX& xa, const WeightMatrix& w, const float* bias, float* y, int64_t ldy,
                  int64_t outputs, int64_t n_begin, int64_t n_end) {
  constexpr int kOutsPerBlock = kGlu ? kBlockCols / 2 : kBlockCols;
  constexpr int64_t kChunkBytes = 128;
  const QuantizedX& x = *xa.x;
  const bool four = w.quant.bits == 4, affine = w.quant.affine;
  const int zero = affine ? 0 : symmetric_zero(w.quant.bits);
  const int kq = int8_step_bytes(x.group_stride);
  const int64_t group_bytes = quant_group_bytes(w);
  const int64_t codes_bytes = quant_codes_bytes(w);  // a group's codes in the layout
  const int64_t unpacked_bytes = x.group_stride / 4 * kChunkBytes;            // ... as 8-bit chunks
  const int64_t block_bytes = x.groups * group_bytes;
  const auto* base = static_cast<const unsigned char*>(w.data);
  thread_local std::vector<unsigned char> unpacked;  // 4 bits: the block's codes as 8-bit chunks, group by group
  if (four) unpacked.resize(static_cast<size_t>(x.groups * unpacked_bytes));
  alignas(64) int32_t sums[2 * kTileRows][kBlockCols];
  alignas(64) float total[2 * kTileRows][kBlockCols];
  Tiles::configure(kq, kq / 4);
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kBlockCols) {
    const unsigned char* block = base + (j0 / kBlockCols) * block_bytes;
    if (four) {
      for (int64_t g = 0; g < x.groups; ++g)
        Tiles::unpack_nibble_chunks(block + g * group_bytes, x.group_stride / 8, unpacked.data() + g * unpacked_bytes);
    }
    const int64_t out0 = j0 / kBlockCols * kOutsPerBlock;
    const int outs = static_cast<int>(std::min<int64_t>(kOutsPerBlock, outputs - out0));
    for (int i = 0; i < x.m; i += 2 * kTileRows) {
      const bool two = i + kTileRows < xa.padded_rows;
      const int rows = std::min(x.m - i, two ? 2 * kTileRows : kTileRows);
      for (auto& row : total) std::fill(std::begin(row), std::end(row), 0.0f);
      for (int64_t g = 0; g < x.groups; ++g) {
        const unsigned char* group = block + g * group_bytes;
        const unsigned char* codes = four ? unpacked.data() + g * unpacked_bytes : group;
        const int8_t* a0 = xa.codes + static_cast<int64_t>(i) * xa.ld + g * x.group_stride;
        Tiles::template zero<0>();
        Tiles::template zero<1>();
        if (two) {
          Tiles::template zero<2>();
          Tiles::template zero<3>();
        }
        for (int64_t t = 0; t < x.group_stride; t += kq) {
          const unsigned char* chunk = codes + t / 4 * kChunkBytes;
          Tiles::template load<4>(a0 + t, xa.ld);
          Tiles::template load<6>(chunk, kChunkBytes);
          Tiles::template load<7>(chunk + 64, kChunkBytes);
          Tiles::template dot_s8u8<0, 4, 6>();
          Tiles::template dot_s8u8<1, 4, 7>();
          if (two) {
            Tiles::template load<5>(a0 + kTileRows * xa.ld + t, xa.ld);
            Tiles::template dot_s8u8<2, 5, 6>();
            Tiles::template dot_s8u8<3, 5, 7>();
          }
        }
        Tiles::template store<0>(&sums[0][0], sizeof(sums[0]));
        Tiles::template store<1>(&sums[0][16], sizeof(sums[0]));
        if (two) {
          Tiles::template store<2>(&sums[kTileRows][0], sizeof(sums[0]));
          Tiles::template store<3>(&sums[kTileRows][16], sizeof(sums[0]));
        }
        const auto* scales = reinterpret_cast<const uint16_t*>(group + codes_bytes);
        Tiles::add_group_sums(sums, rows, scales, affine ? scales + kBlockCols : nullptr,
                              x.code_sums + static_cast<int64_t>(i) * x.groups + g, x.groups, zero, total);
      }
      for (int r = 0; r < rows; ++r) {
        const float sx = x.row_scales[i + r];
        float* yr = y + static_cast<int64_t>(i + r) * ldy + out0;
        const float* s = total[r];
        for (int c = 0; c < outs; ++c)
          yr[c] = kGlu ? silu(sx * s[c]) * (sx * s[16 + c]) : sx * s[c] + (bias ? bias[j0 + c] : 0.0f);
      }
    }
  }
  Tiles::release();
}

}  // namespace actord::cpu::amx_detail
