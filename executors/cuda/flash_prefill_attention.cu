// Causal attention of long prefill sequences in one kernel on the tensor cores (flash attention: the scores and
// probabilities stay in registers instead of passing through device memory as the cuBLAS path's S and P do).
//
// A block takes one prefill tile (up to kPrefillTileQueries queries of a sequence, from the step's plan) for up to
// kMaxHeadsPerBlock query heads of one KV head: two warps per head, 16 queries each (the m of mma.m16n8k16). Keys and
// values come through shared memory kKeyTile at a time, read once per block for all its heads (GQA), in two stages:
// the next tile's 16-byte copies (cp.async) are in flight while the block computes on the current one. S = Q K^T
// takes its B fragments from the keys as 32-bit words; P V takes them from the values as they are stored ([key]
// [dimension]) with ldmatrix.trans, which hands each lane the transposed pairs. Per key tile a warp computes S = Q K^T
// (Q scaled by 1/sqrt(head_dim) and rounded to the cache's type, as the cuBLAS path does), masks it (causal and the
// sliding window), updates its rows' running max and sum, and adds P V (P rounded to the cache's type) to its
// accumulators; the rows are divided by their sums at the end. All sums in f32.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

namespace actord::cuda {

namespace {

constexpr int kQueriesPerWarp = 16;
constexpr int kKeyTile = 64;
constexpr int kMaxHeadsPerBlock = 4;
constexpr int kPad = 8;  // elements after each shared row (16 bytes): the fragment loads hit 32 different banks

// D += A B for one m16n8k16 tile: A 16 x 16 (row-major fragments, 4 words of two values), B 16 x 8 (column-major, 2
// words), D 16 x 8 f32. Fragment layout (PTX ISA, mma.m16n8k16 for 16-bit types): with g = lane / 4, t = lane % 4,
// A word 0 = row g, columns 2t, 2t + 1; word 1 = row g + 8; words 2, 3 = the same rows, columns + 8. B word 0 = rows
// (k) 2t, 2t + 1 of column g; word 1 = rows + 8. D element e = row g + 8 (e / 2), column 2t + e % 2.
template <class T>
struct Mma {
  static __device__ __forceinline__ void run(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
  }
  // Two values rounded to T (from_f32, round to nearest even), the first in the low half (the lower column).
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const T pair[2] = {from_f32<T>(lo), from_f32<T>(hi)};
    uint32_t word;
    memcpy(&word, pair, sizeof word);
    return word;
  }
};

template <class T>
__device__ __forceinline__ uint32_t word_at(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// 16 bytes from global to shared memory without passing through registers (cp.async, completed by
// wait_copies); zeros where !present (nothing is read then: the source size is 0).
__device__ __forceinline__ void copy_16_async(void* shared_dst, const void* src, bool present) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(present ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// Four 8 x 8 matrices of 16-bit values from shared memory, transposed: lane l gives the address of row l % 8 of
// matrix l / 8; register i of lane (g, t) = (lane / 4, lane % 4) receives matrix i's elements (row 2t, column g) and
// (row 2t + 1, column g): with rows as keys and columns as dimensions, the B fragment word of mma.m16n8k16 for
// keys 2t, 2t + 1 and dimension g.
__device__ __forceinline__ void load_transposed_x4(const void* row_address, uint32_t* r) {
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

template <int HD>
__host__ __device__ constexpr size_t stage_elements() {
  return size_t(2) * kKeyTile * (HD + kPad);  // a tile's keys, then its values, rows of HD + kPad
}
// The dynamic shared memory of flash_prefill_kernel<T, HD>: two stages of a key tile's keys and values.
template <class T, int HD>
__host__ __device__ constexpr size_t flash_shared_bytes() {
  return 2 * stage_elements<HD>() * sizeof(T);
}

// Grid: (the tiles first_tile .. first_tile + gridDim.x - 1, n_heads / heads_per_block); 64 * heads_per_block threads.
template <class T, int HD>
__global__ void __launch_bounds__(64 * kMaxHeadsPerBlock) flash_prefill_kernel(
    StepLayout step, int first_tile, const float* __restrict__ q, float* __restrict__ out, int n_heads,
    int n_kv_heads, int heads_per_block, float scale, int window, KvView kv) {
  extern __shared__ __align__(16) unsigned char flash_shared[];
  T* const stages = reinterpret_cast<T*>(flash_shared);  // stage s: keys [kKeyTile][HD + kPad], then values alike
  constexpr int kSteps = HD / 16, kKeyTiles8 = kKeyTile / 8, kDimTiles8 = HD / 8, kChunks = HD / 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g4 = lane >> 2, t4 = lane & 3;
  // The last tiles (the most keys) first: the longest blocks start in the first wave, not the last.
  const int32_t* tile = step.tiles + 3 * (first_tile + int(gridDim.x - 1 - blockIdx.x));
  const int t0 = tile[0], count = tile[1], seq = tile[2];
  const int head = int(blockIdx.y) * heads_per_block + warp / 2;
  const int g = head / (n_heads / n_kv_heads);
  const int row0 = (warp & 1) * kQueriesPerWarp;  // the warp's first query in the tile
  const bool active = row0 < count;
  const int p_first = step.token_pos[t0], q_last = p_first + count - 1;
  const int k_first = window > 0 ? max(0, p_first - window + 1) : 0;

  uint32_t qa[kSteps][4];  // the warp's 16 query rows as A fragments (absent rows zero)
  {
    const int ra = row0 + g4, rb = ra + 8;
    const float* qra = q + (int64_t(t0 + ra) * n_heads + head) * HD;
    const float* qrb = q + (int64_t(t0 + rb) * n_heads + head) * HD;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      const int c = kk * 16 + 2 * t4;
      const float2 zero = make_float2(0.0f, 0.0f);
      const float2 a0 = ra < count ? *reinterpret_cast<const float2*>(qra + c) : zero;
      const float2 a1 = rb < count ? *reinterpret_cast<const float2*>(qrb + c) : zero;
      const float2 a2 = ra < count ? *reinterpret_cast<const float2*>(qra + c + 8) : zero;
      const float2 a3 = rb < count ? *reinterpret_cast<const float2*>(qrb + c + 8) : zero;
      qa[kk][0] = Mma<T>::pack(a0.x * scale, a0.y * scale);
      qa[kk][1] = Mma<T>::pack(a1.x * scale, a1.y * scale);
      qa[kk][2] = Mma<T>::pack(a2.x * scale, a2.y * scale);
      qa[kk][3] = Mma<T>::pack(a3.x * scale, a3.y * scale);
    }
  }

  float o[kDimTiles8][4];
#pragma unroll
  for (int dn = 0; dn < kDimTiles8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g4 and g4 + 8: running max, this lane's sum
  const T* kc = static_cast<const T*>(kv.k_base);
  const T* vc = static_cast<const T*>(kv.v_base);

  // The copies of the key tile at k0 into stage `stage` (keys and values past q_last as zeros), one group.
  auto load_tile = [&](int stage, int k0) {
    T* const keys = stages + size_t(stage) * stage_elements<HD>();
    T* const values = keys + size_t(kKeyTile) * (HD + kPad);
    for (int i = int(threadIdx.x); i < kKeyTile * kChunks; i += int(blockDim.x)) {
      const int key = i / kChunks, part = i % kChunks, pos = k0 + key;
      const bool present = pos <= q_last;
      const int64_t at = present ? kv_offset(step, kv, seq, pos, g, HD) + part * 8 : 0;
      copy_16_async(keys + key * (HD + kPad) + part * 8, kc + at, present);
      copy_16_async(values + key * (HD + kPad) + part * 8, vc + at, present);
    }
    commit_copies();
  };
  if (k_first <= q_last) load_tile(0, k_first);
  for (int k0 = k_first, stage = 0; k0 <= q_last; k0 += kKeyTile, stage ^= 1) {
    // The next tile's copies go into the other stage (the block finished with it at the end of the last
    // iteration), then this tile's are awaited: one group may stay in flight.
    if (k0 + kKeyTile <= q_last) load_tile(stage ^ 1, k0 + kKeyTile);
    else commit_copies();  // an empty group: the count of groups stays the same
    wait_copies<1>();
    __syncthreads();  // every thread's copies of this tile are in shared memory
    const T* const keys = stages + size_t(stage) * stage_elements<HD>();
    const T* const values = keys + size_t(kKeyTile) * (HD + kPad);
    if (!active) {
      __syncthreads();
      continue;
    }

    float s[kKeyTiles8][4];  // S = Q K^T of the warp's rows and the tile's keys
#pragma unroll
    for (int j = 0; j < kKeyTiles8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
      for (int j = 0; j < kKeyTiles8; ++j) {
        const T* krow = keys + (j * 8 + g4) * (HD + kPad) + kk * 16 + 2 * t4;
        Mma<T>::run(s[j], qa[kk], word_at(krow), word_at(krow + 8));
      }
    }
    // Causal and window masks, then the rows' maxima over the quad of lanes that holds them.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKeyTiles8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int qpos = p_first + row0 + g4 + 8 * r, kpos = k0 + j * 8 + 2 * t4 + (e & 1);
        const bool keep = kpos <= qpos && (window <= 0 || kpos > qpos - window);
        s[j][e] = keep ? s[j][e] : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], s[j][e]);
      }
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);
      base[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: every weight 0, no NaN
      const float correction = __expf(m[r] - base[r]);
      m[r] = m_new;
      l[r] *= correction;
#pragma unroll
      for (int dn = 0; dn < kDimTiles8; ++dn) {
        o[dn][2 * r] *= correction;
        o[dn][2 * r + 1] *= correction;
      }
    }
#pragma unroll
    for (int j = 0; j < kKeyTiles8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = __expf(s[j][e] - base[e >> 1]);
        s[j][e] = p;
        l[e >> 1] += p;
      }
    }
    // O += P V: the S fragments of key columns 16 j2 .. 16 j2 + 15 are the A fragment of one step.
#pragma unroll
    for (int j2 = 0; j2 < kKeyTile / 16; ++j2) {
      const uint32_t pa[4] = {Mma<T>::pack(s[2 * j2][0], s[2 * j2][1]), Mma<T>::pack(s[2 * j2][2], s[2 * j2][3]),
                              Mma<T>::pack(s[2 * j2 + 1][0], s[2 * j2 + 1][1]),
                              Mma<T>::pack(s[2 * j2 + 1][2], s[2 * j2 + 1][3])};
      // Lane l addresses key 16 j2 + l % 16 at dimension 8 (l / 16) of a pair of dimension tiles: registers 0, 1
      // are the B words of the first tile (keys 2t, 2t + 1, then + 8), 2, 3 those of the second.
      const T* vlane = values + (j2 * 16 + (lane & 15)) * (HD + kPad) + 8 * (lane >> 4);
#pragma unroll
      for (int dn = 0; dn < kDimTiles8; dn += 2) {
        uint32_t b[4];
        load_transposed_x4(vlane + dn * 8, b);
        Mma<T>::run(o[dn], pa, b[0], b[1]);
        Mma<T>::run(o[dn + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration's copies overwrite it
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int row = row0 + g4 + 8 * r;
    if (row >= count) continue;
    const float inv = 1.0f / l[r];  // the diagonal key is always kept: l > 0
    float* dst = out + (int64_t(t0 + row) * n_heads + head) * HD + 2 * t4;
#pragma unroll
    for (int dn = 0; dn < kDimTiles8; ++dn) {
      *reinterpret_cast<float2*>(dst + dn * 8) = make_float2(o[dn][2 * r] * inv, o[dn][2 * r + 1] * inv);
    }
  }
}

int heads_per_block(int n_heads, int n_kv_heads) {
  const int group = n_heads / n_kv_heads;
  int h = group < kMaxHeadsPerBlock ? group : kMaxHeadsPerBlock;
  while (group % h != 0) --h;
  return h;
}

}  // namespace

bool flash_prefill_fits(DType kv_dtype, int head_dim, int n_heads, int n_kv_heads, const KvView& kv) {
  const bool aligned = (reinterpret_cast<uintptr_t>(kv.k_base) | reinterpret_cast<uintptr_t>(kv.v_base)) % 16 == 0 &&
                       kv.block_stride % 8 == 0 && kv.head_stride % 8 == 0;
  return (kv_dtype == DType::bf16 || kv_dtype == DType::f16) && (head_dim == 64 || head_dim == 128) &&
         n_kv_heads > 0 && n_heads % n_kv_heads == 0 && aligned;
}

void launch_flash_prefill(const StepLayout& step, int first_tile, int n_tiles, const float* q, float* out,
                          int n_heads, int n_kv_heads, int head_dim, int window, const KvView& kv,
                          cudaStream_t stream) {
  if (n_tiles <= 0 || !flash_prefill_fits(kv.dtype, head_dim, n_heads, n_kv_heads, kv)) return;
  const int per_block = heads_per_block(n_heads, n_kv_heads);
  const dim3 grid(unsigned(n_tiles), unsigned(n_heads / per_block));
  const unsigned threads = unsigned(64 * per_block);
  const float scale = 1.0f / std::sqrt(float(head_dim));  // as the cuBLAS path scales Q
  auto launch = [&](auto zero, auto dims) {
    using T = decltype(zero);
    constexpr int HD = decltype(dims)::value;
    constexpr size_t bytes = flash_shared_bytes<T, HD>();
    // Past the default 48 KB of dynamic shared memory: set for the current device at each launch (a process may
    // drive several devices; a prefill step launches this once a layer).
    ACTORD_CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(bytes)));
    flash_prefill_kernel<T, HD><<<grid, threads, bytes, stream>>>(step, first_tile, q, out, n_heads, n_kv_heads,
                                                                  per_block, scale, window, kv);
  };
  auto with_dims = [&](auto zero) {
    if (head_dim == 64) {
      launch(zero, std::integral_constant<int, 64>{});
    } else {
      launch(zero, std::integral_constant<int, 128>{});
    }
  };
  if (kv.dtype == DType::bf16) {
    with_dims(__nv_bfloat16{});
  } else {
    with_dims(__half{});
  }
}

}  // namespace actord::cuda
