// Microbenchmark of decode attention (executors/cpu/kernels.hpp paged_attention) on a 134M Llama's shapes: 12
// layers x 12 heads x head_dim 64, bf16 K/V in 16-token blocks scattered over a cache too large for L3, one query per
// sequence per step, tasks of (sequence, group of heads) over the pool as the model makes them (or HEADS_PER_TASK
// heads each). Prints the time per step (all layers) and the K/V bytes read per second.
// Usage: actord_attention_bench [threads] [sequences] [context] [heads_per_task]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "core/large_buffer.hpp"

#include "executors/cpu/kernels.hpp"
#include "executors/cpu/thread_pool.hpp"

using namespace actord;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int seqs = argc > 2 ? std::atoi(argv[2]) : 32;
  const int context = argc > 3 ? std::atoi(argv[3]) : 160;
  constexpr int kLayers = 12, kHeads = 12, kHeadDim = 64, kBlock = 16;
  const int blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int n_blocks = seqs * blocks_per_seq;
  const int64_t head_stride = int64_t(kBlock) * kHeadDim, block_stride = head_stride * kHeads;
  const int64_t layer_elems = int64_t(n_blocks) * block_stride;
  std::mt19937 rng(1);
  // The cache as KvCache allocates it (huge pages).
  LargeBuffer k_buffer(size_t(layer_elems) * kLayers * 2), v_buffer(size_t(layer_elems) * kLayers * 2);
  auto* k = reinterpret_cast<uint16_t*>(k_buffer.data());
  auto* v = reinterpret_cast<uint16_t*>(v_buffer.data());
  for (int64_t i = 0; i < layer_elems * kLayers; ++i) {
    k[i] = static_cast<uint16_t>(0x3c00 + rng() % 256);
    v[i] = static_cast<uint16_t>(0x3c00 + rng() % 256);
  }
  std::vector<uint32_t> order(n_blocks);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);  // pages scattered, as after a while of serving
  std::vector<float> q(size_t(seqs) * kHeads * kHeadDim, 0.1f), out(q.size());
  cpu::ThreadPool pool(threads);
  const int heads_per_task = argc > 4 ? std::atoi(argv[4]) : cpu::decode_heads_per_task(kHeads, kHeads, seqs, threads);
  const int tasks_per_seq = (kHeads + heads_per_task - 1) / heads_per_task;
  auto step = [&] {
    for (int l = 0; l < kLayers; ++l) {
      pool.parallel_for(seqs * tasks_per_seq, [&](int task) {
        const int s = task / tasks_per_seq, h = task % tasks_per_seq * heads_per_task;
        cpu::PagedAttentionParams p;
        p.q = q.data() + size_t(s) * kHeads * kHeadDim;
        p.out = out.data() + size_t(s) * kHeads * kHeadDim;
        p.n_tokens = 1;
        p.start_pos = context - 1;
        p.n_heads = p.n_kv_heads = kHeads;
        p.head_begin = h;
        p.head_end = std::min(kHeads, h + heads_per_task);
        p.head_dim = kHeadDim;
        p.block_size = kBlock;
        p.block_table = order.data() + size_t(s) * blocks_per_seq;
        p.k_base = k + l * layer_elems;
        p.v_base = v + l * layer_elems;
        p.kv_dtype = DType::bf16;
        p.block_stride = block_stride;
        p.head_stride = head_stride;
        cpu::paged_attention(p);
      });
    }
  };
  step();
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  int steps = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 3.0 || steps < 5) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ++steps;
  }
  const double bytes = 2.0 * seqs * context * kLayers * kHeads * kHeadDim * 2;
  std::printf("threads %d, %d sequences x %d tokens, %d heads per task, bf16 K/V: best step %.2f ms, %.1f GB/s of K/V\n",
              threads, seqs, context, heads_per_task, best * 1e3, bytes / best / 1e9);
}
