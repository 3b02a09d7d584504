// Sampling rows of logits where they are (launch_device_sampling in cuda_kernels.cuh): executors/sampler.cpp's rules
// on the GPU, a block per row, so that no logits cross to the host.
//
// A row: its penalty and mask operations in order (one thread: each id once per kind, as the CPU applies them), the
// maximum (and first index holding it: the greedy token), then for a draw the scaled logits s = l / t and weights
// w = exp(double(s - max s)): with top-k, the k best by (s, lower id) through a radix select on s's bits; without,
// the row's total weight (min-p applied) and the fewest best tokens that certainly hold the mass the walk needs (the
// CPU sampler's band floors: 4096, 64 and 1 times (total - mass) / 2n). The candidates, at most
// kDeviceSampleCandidates, are sorted by rank in shared memory and walked as sampler.cpp's walk() does (top-p keep,
// r = u x total, the first whose running sum passes r). A row whose candidates would not fit (a top-k whose k-th has
// too many equals, a head wider than kCandidates) is drawn over the whole row instead (wide_draw: searches of the
// running weight in rank order, 4 bits of a 64-bit key of scaled logit and id a pass), so that no row planned for the
// device leaves it; only rows the plan leaves to the host get -1.
#include <cstdint>

#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/device_util.cuh"

namespace actord::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kCandidates = kDeviceSampleCandidates;
static_assert(kCandidates == kThreads, "the bitonic sort gives each thread one candidate");

// Higher scaled logit first, lower id first on ties (sampler.cpp's ranks_before).
__device__ __forceinline__ bool ranks_before(float as, int ai, float bs, int bi) {
  return as > bs || (as == bs && ai < bi);
}

// s's bits ordered as unsigned integers: a higher float, a higher key; -0 and +0 one key, as they compare equal
// (NaN is not asked).
__device__ __forceinline__ uint32_t order_key(float s) {
  const uint32_t u = __float_as_uint(s == 0.0f ? 0.0f : s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ double scaled_weight(float raw, float t, float max_scaled) {
  return exp(double(raw / t - max_scaled));  // float division and subtraction, then double: sampler.cpp's
}

struct Shared {
  float s[kCandidates];
  int id[kCandidates];
  double dwarp[32];
  float fwarp[32];
  int iwarp[32];
  unsigned hist[256];
  int count;
  double wbins[kThreads / 32][16];  // wide_draw's searches: each warp's sums by digit
  double bins[16];                  // and the block's
  unsigned long long kmin[kThreads / 32];
};

// A block's sum (every thread gets it, summed in warp order: the same on every thread). T: double or int.
template <class T>
__device__ T block_sum(T v, T* per_warp) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) per_warp[threadIdx.x >> 5] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += per_warp[w];
  return total;
}

// The highest value and the lowest index holding it (index -1: none, NaN ignored).
__device__ void block_best(float& value, int& index, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    keep_best(value, index, __shfl_xor_sync(0xffffffffu, value, o), __shfl_xor_sync(0xffffffffu, index, o));
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    sh.fwarp[threadIdx.x >> 5] = value;
    sh.iwarp[threadIdx.x >> 5] = index;
  }
  __syncthreads();
  value = -INFINITY;
  index = -1;
  for (int w = 0; w < kThreads / 32; ++w) keep_best(value, index, sh.fwarp[w], sh.iwarp[w]);
}

// sh.s / sh.id [0, kCandidates) in rank order (empty places hold -inf and INT_MAX: they rank last).
__device__ void sort_candidates(Shared& sh) {
  for (int k = 2; k <= kCandidates; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      __syncthreads();
      const int i = threadIdx.x, other = i ^ j;
      if (other > i) {
        const bool ascending = (i & k) == 0;  // "ascending": in rank order
        const bool swap = ascending ? ranks_before(sh.s[other], sh.id[other], sh.s[i], sh.id[i])
                                    : ranks_before(sh.s[i], sh.id[i], sh.s[other], sh.id[other]);
        if (swap) {
          const float ts = sh.s[i];
          const int ti = sh.id[i];
          sh.s[i] = sh.s[other];
          sh.id[i] = sh.id[other];
          sh.s[other] = ts;
          sh.id[other] = ti;
        }
      }
    }
  }
  __syncthreads();
}

// sampler.cpp's walk() over the sorted candidates (count of them; weights below min_weight or 0 end the list).
__device__ int32_t walk(const Shared& sh, int count, float max_scaled, double min_weight, double total, float top_p,
                        double u) {
  auto weight = [&](int i, double& w) {
    if (i >= count) return false;
    w = exp(double(sh.s[i] - max_scaled));
    return w > 0.0 && w >= min_weight;
  };
  double w = 0.0;
  int keep = count;
  if (top_p < 1.0f) {
    double mass = 0.0;
    for (keep = 0; weight(keep, w);) {
      ++keep;
      if ((mass += w / total) >= top_p) break;
    }
    total = 0.0;
    for (int j = 0; j < keep && weight(j, w); ++j) total += w;
  }
  const double r = u * total;
  double acc = 0.0;
  int i = 0;
  for (; i < keep && weight(i, w); ++i)
    if (r < (acc += w)) return sh.id[i];
  return sh.id[i > 0 ? i - 1 : 0];
}

// A token's place in rank order as one key, higher first: its scaled logit's order_key, then the lower id (unique).
__device__ __forceinline__ uint64_t rank_key(float s, int i) {
  return (uint64_t(order_key(s)) << 32) | uint64_t(~uint32_t(i));
}
__device__ __forceinline__ int32_t token_of(uint64_t key) { return int32_t(~uint32_t(key)); }

// A radix select's digit: the highest whose bin, with the bins above it, holds the `remaining`-th best key;
// `remaining` becomes its rank within that bin. Every thread walks the same histogram to the same digit.
__device__ int digit_holding(const unsigned* hist, int& remaining) {
  int above = 0;
  for (int d = 255; d >= 0; --d) {
    const int here = int(hist[d]);
    if (above + here >= remaining) {
      remaining -= above;
      return d;
    }
    above += here;
  }
  remaining -= above;
  return 0;
}

// hist[bin] += 1 for each lane of the warp that counts, one atomic per distinct bin (a flat row's keys mostly share
// one). Every lane of the warp calls it (a loop whose bounds are the same for the whole warp).
__device__ __forceinline__ void count_in(unsigned* hist, bool counted, unsigned bin) {
  const unsigned peers = __match_any_sync(0xffffffffu, counted ? bin : 0xffffffffu);
  if (counted && (threadIdx.x & 31) == unsigned(__ffs(int(peers)) - 1)) atomicAdd(&hist[bin], unsigned(__popc(peers)));
}

// The rank key of the row's k-th best token (NaN scaled logits left out; k <= their count), by radix select over the
// 64-bit keys, 8 bits a pass. Every thread gets it.
__device__ uint64_t kth_key(const float* row, int vocab, float t, int k, Shared& sh) {
  uint64_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int base = 0; base < vocab; base += kThreads) {  // the same trips for every lane: count_in
      const int i = base + int(threadIdx.x);
      const float s = i < vocab ? row[i] / t : NAN;
      const uint64_t key = isnan(s) ? 0 : rank_key(s, i);
      count_in(sh.hist, !isnan(s) && (key & mask) == prefix, unsigned((key >> shift) & 255u));
    }
    __syncthreads();
    prefix |= uint64_t(digit_holding(sh.hist, remaining)) << shift;
    mask |= uint64_t(255) << shift;
    __syncthreads();  // the histogram is cleared for the next pass only after every thread read it
  }
  return prefix;
}

// A token counts for the walk when its weight is above 0 and not below min-p's, and its key is not below `lowest`
// (top-k's k-th, or top-p's last kept): its weight, else 0. Weights fall in rank order, so the counted tokens are a
// prefix of the ranking, as the walk of sampler.cpp sees them.
__device__ __forceinline__ double counted_weight(float s, uint64_t key, uint64_t lowest, float max_scaled,
                                                 double min_weight) {
  if (isnan(s) || key < lowest) return 0.0;
  const double w = exp(double(s - max_scaled));
  return w > 0.0 && w >= min_weight ? w : 0.0;
}

// The block's sums of every thread's 16 values, into sh.bins (each summed in thread order within a warp's tree, then
// warp by warp: the same on every run).
__device__ void block_bin_sums(double (&v)[16], Shared& sh) {
#pragma unroll
  for (int b = 0; b < 16; ++b)
    for (int o = 16; o > 0; o >>= 1) v[b] += __shfl_xor_sync(0xffffffffu, v[b], o);
  if ((threadIdx.x & 31) == 0)
    for (int b = 0; b < 16; ++b) sh.wbins[threadIdx.x >> 5][b] = v[b];
  __syncthreads();
  if (threadIdx.x < 16) {
    double sum = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) sum += sh.wbins[w][threadIdx.x];
    sh.bins[threadIdx.x] = sum;
  }
  __syncthreads();
}

// The counted token at which the running weight of the row in rank order first passes `target` (reaches it when
// `inclusive`, exceeds it otherwise), found 4 bits of its rank key a pass: each pass sums the counted weights under
// the digits found so far by the next digit and descends into the digit where the running sum passes. `before`: the
// weight ranked before the token. Every thread gets the same answer; false when the counted weight does not pass
// target. The sums run in another order than sampler.cpp's sequential ones, so a target within rounding of a token's
// running sum may go to its neighbour (as the device's total does): below, a group whose parts fall short of its sum
// gives its last token.
__device__ bool weighted_search(const float* row, int vocab, float t, float max_scaled, double min_weight,
                                uint64_t lowest, double target, bool inclusive, Shared& sh, uint64_t& key,
                                double& before) {
  uint64_t prefix = 0, mask = 0;
  before = 0.0;
  for (int shift = 60; shift >= 0; shift -= 4) {
    double v[16];
#pragma unroll
    for (int b = 0; b < 16; ++b) v[b] = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float s = row[i] / t;
      const uint64_t k = isnan(s) ? 0 : rank_key(s, i);
      if (isnan(s) || (k & mask) != prefix) continue;
      const double w = counted_weight(s, k, lowest, max_scaled, min_weight);
      const unsigned bin = unsigned(k >> shift) & 15u;
#pragma unroll
      for (int b = 0; b < 16; ++b) v[b] += bin == unsigned(b) ? w : 0.0;
    }
    block_bin_sums(v, sh);
    int digit = -1, last = -1;
    double at_last = before;  // the running sum before the last non-empty digit
    for (int d = 15; d >= 0 && digit < 0; --d) {
      const double here = sh.bins[d];
      if (here > 0.0) {
        last = d;
        at_last = before;
      }
      if (here > 0.0 && (inclusive ? before + here >= target : before + here > target)) digit = d;
      else before += here;
    }
    if (digit < 0) {
      if (shift == 60 || last < 0) return false;
      digit = last;  // rounding: the group passed, its parts do not
      before = at_last;
    }
    prefix |= uint64_t(digit) << shift;
    mask |= uint64_t(15) << shift;
    __syncthreads();  // sh.bins read by every thread before the next pass writes it
  }
  key = prefix;
  return true;
}

// The lowest rank key among the counted tokens (the last the walk can reach); ~0 when none.
__device__ uint64_t last_counted(const float* row, int vocab, float t, float max_scaled, double min_weight,
                                 uint64_t lowest, Shared& sh) {
  unsigned long long mine = ~0ull;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float s = row[i] / t;
    const uint64_t k = isnan(s) ? 0 : rank_key(s, i);
    if (counted_weight(s, k, lowest, max_scaled, min_weight) > 0.0 && k < mine) mine = k;
  }
  for (int o = 16; o > 0; o >>= 1) mine = min(mine, __shfl_xor_sync(0xffffffffu, mine, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh.kmin[threadIdx.x >> 5] = mine;
  __syncthreads();
  unsigned long long all = ~0ull;
  for (int w = 0; w < kThreads / 32; ++w) all = min(all, sh.kmin[w]);
  return all;
}

// sampler.cpp's draw for the rows its candidate lists cannot hold (a top-k whose k-th has more than kCandidates
// equals, or a head wider than kCandidates), over the whole row by weighted searches in rank order: top_k > 0 keeps
// the k best (their total summed here), else `total` is the row's; top-p keeps the tokens up to the one where the
// running weight reaches top_p x total; the draw is the first whose running weight exceeds u x the kept total (the
// last kept when rounding leaves it past them all). Every thread gets the token.
__device__ int32_t wide_draw(const float* row, int vocab, float t, float max_scaled, double min_weight, float top_p,
                             double u, int top_k, double total, int32_t argmax, Shared& sh) {
  uint64_t lowest = 0;
  if (top_k > 0) {
    lowest = kth_key(row, vocab, t, top_k, sh);
    double mine = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float s = row[i] / t;
      mine += counted_weight(s, isnan(s) ? 0 : rank_key(s, i), lowest, max_scaled, min_weight);
    }
    total = block_sum(mine, sh.dwarp);
  }
  uint64_t key = 0;
  double before = 0.0;
  double kept = total;
  if (top_p < 1.0f &&
      weighted_search(row, vocab, t, max_scaled, min_weight, lowest, double(top_p) * total, true, sh, key, before)) {
    const int32_t id = token_of(key);
    kept = before + exp(double(row[id] / t - max_scaled));
    lowest = key;
  }
  if (weighted_search(row, vocab, t, max_scaled, min_weight, lowest, u * kept, false, sh, key, before))
    return token_of(key);
  const uint64_t last = last_counted(row, vocab, t, max_scaled, min_weight, lowest, sh);
  return last == ~0ull ? argmax : token_of(last);
}

__global__ void __launch_bounds__(kThreads) device_sampling_kernel(float* logits, int vocab,
                                                                   const DeviceSampleParams* params,
                                                                   const DeviceSampleOp* ops, int32_t* out) {
  __shared__ Shared sh;
  const int r = blockIdx.x, tid = threadIdx.x;
  const DeviceSampleParams p = params[r];
  if (p.host) {
    if (tid == 0) out[r] = -1;
    return;
  }
  float* row = logits + int64_t(r) * vocab;
  if (tid == 0) {  // biases, penalties, then masks, in the order given (sampler.cpp's penalise_and_mask)
    for (int k = p.ops_first; k < p.ops_first + p.ops_count; ++k) {
      const DeviceSampleOp op = ops[k];
      if (op.id < 0 || op.id >= vocab) continue;
      const float l = row[op.id];
      row[op.id] = op.kind == DeviceSampleOp::kRepetition ? (l > 0.0f ? l / op.value : l * op.value)
                   : op.kind == DeviceSampleOp::kSubtract   ? l - op.value
                                                            : -INFINITY;
    }
  }
  __syncthreads();

  float best = -INFINITY;
  int best_at = -1;
  for (int i = tid; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v > best || (best_at < 0 && v == best)) {  // NaN never; an all -inf row keeps its first -inf
      best = v;
      best_at = i;
    }
  }
  block_best(best, best_at, sh);
  const int32_t argmax = best_at < 0 ? 0 : best_at;
  const float t = p.temperature;
  const float max_scaled = best / t;
  if (t <= 0.0f || p.top_k == 1 || vocab <= 1 || !isfinite(max_scaled)) {
    if (tid == 0) out[r] = argmax;
    return;
  }
  const double u = uniform_from_key(p.key), min_weight = p.min_p;
  sh.s[tid] = -INFINITY;
  sh.id[tid] = INT32_MAX;
  if (tid == 0) sh.count = 0;
  __syncthreads();

  double total = 0.0;
  if (p.top_k > 0 && p.top_k < vocab) {
    // The k best scaled logits: the k-th's key by radix select (8 bits a pass), then every token above it and
    // those equal to it (the lowest ids among them make the k after the sort).
    int non_nan = 0;
    for (int i = tid; i < vocab; i += kThreads) non_nan += !isnan(row[i] / t);
    non_nan = block_sum(non_nan, sh.iwarp);
    const bool all = non_nan <= p.top_k;
    uint32_t prefix = 0, mask = 0;
    int remaining = p.top_k;
    for (int shift = 24; shift >= 0 && !all; shift -= 8) {
      for (int b = tid; b < 256; b += kThreads) sh.hist[b] = 0;
      __syncthreads();
      // One atomic per distinct bin of a warp (count_in): a nearly flat row's keys share a few bins.
      for (int base = 0; base < vocab; base += kThreads) {  // the same trips for every lane: count_in
        const int i = base + tid;
        const float s = i < vocab ? row[i] / t : NAN;
        const uint32_t key = isnan(s) ? 0u : order_key(s);
        count_in(sh.hist, !isnan(s) && (key & mask) == prefix, (key >> shift) & 255u);
      }
      __syncthreads();
      const int digit = digit_holding(sh.hist, remaining);
      prefix |= uint32_t(digit) << shift;
      mask |= 255u << shift;
      __syncthreads();  // the histogram is cleared for the next pass only after every thread read it
    }
    for (int i = tid; i < vocab; i += kThreads) {
      const float s = row[i] / t;
      if (isnan(s) || (!all && order_key(s) < prefix)) continue;
      const int at = atomicAdd(&sh.count, 1);
      if (at < kCandidates) {
        sh.s[at] = s;
        sh.id[at] = i;
      }
    }
    __syncthreads();
    if (sh.count > kCandidates) {  // too many equal to the k-th: the k best in rank order over the whole row
      const int32_t token = wide_draw(row, vocab, t, max_scaled, min_weight, p.top_p, u, p.top_k, 0.0, argmax, sh);
      if (tid == 0) out[r] = token;
      return;
    }
    sort_candidates(sh);
    const int k = min(p.top_k, sh.count);
    if (tid == 0) {
      for (int j = 0; j < k; ++j) {  // sampler.cpp sums a sorted top-k in rank order
        const double w = exp(double(sh.s[j] - max_scaled));
        if (w > 0.0 && w >= min_weight) total += w;
      }
      out[r] = walk(sh, k, max_scaled, min_weight, total, p.top_p, u);
    }
    return;
  }

  // Without top-k: the total weight, then the fewest best tokens holding the mass the walk needs.
  double mine = 0.0;
  for (int i = tid; i < vocab; i += kThreads) {
    const double w = scaled_weight(row[i], t, max_scaled);
    if (w >= min_weight) mine += w;
  }
  total = block_sum(mine, sh.dwarp);
  const double mass = (p.top_p < 1.0f ? double(p.top_p) : u) * total;
  const double safe = (total - mass) / (2.0 * vocab);
  const double floors[3] = {4096.0 * safe, 64.0 * safe, safe};
  double floor = -1.0;
  for (int f = 0; f < 3 && floor < 0.0; ++f) {
    const double at = fmax(floors[f], min_weight);
    int n = 0;
    double held = 0.0;
    for (int i = tid; i < vocab; i += kThreads) {
      const double w = scaled_weight(row[i], t, max_scaled);
      if (w >= at && w > 0.0) {
        ++n;
        held += w;
      }
    }
    n = block_sum(n, sh.iwarp);
    held = block_sum(held, sh.dwarp);
    // Enough: all of min-p's tokens, or (with a margin for the sums' order) more than the walk's mass.
    const bool enough = at == min_weight || held > mass + 1e-9 * total;
    if (n <= kCandidates && enough) floor = at;
  }
  if (floor < 0.0) {  // a head wider than the candidates: walked over the whole row
    const int32_t token = wide_draw(row, vocab, t, max_scaled, min_weight, p.top_p, u, 0, total, argmax, sh);
    if (tid == 0) out[r] = token;
    return;
  }
  for (int i = tid; i < vocab; i += kThreads) {
    const double w = scaled_weight(row[i], t, max_scaled);
    if (w >= floor && w > 0.0) {
      const int at = atomicAdd(&sh.count, 1);
      if (at < kCandidates) {
        sh.s[at] = row[i] / t;
        sh.id[at] = i;
      }
    }
  }
  __syncthreads();
  const int count = min(sh.count, kCandidates);
  sort_candidates(sh);
  if (tid == 0) out[r] = walk(sh, count, max_scaled, min_weight, total, p.top_p, u);
}

}  // namespace

void launch_device_sampling(float* logits, int rows, int vocab, const DeviceSampleParams* params,
                            const DeviceSampleOp* ops, int32_t* out, cudaStream_t stream) {
  if (rows > 0) device_sampling_kernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, ops, out);
}

}  // namespace actord::cuda
