// Microbenchmark of decode attention (executors/cpu/kernels.hpp paged_attention) on a model's shapes: the 134M
// Llama's (12 layers x 12 heads x head_dim 64, bf16 K/V) or stories260K's (5 layers x 8 query / 4 KV heads x
// head_dim 8, f32 K/V), K/V in 16-token blocks scattered over the cache, one query per sequence per step, tasks of
// (sequence, group of heads) over the pool as the model makes them (or HEADS_PER_TASK heads each); KV_DTYPE sets the
// cache's element type (engine.kv_cache_dtype spellings: bfloat16, float16, float32, int8). Prints the time per step
// (all layers) and the K/V bytes read per second (int8: codes and row scales).
// With `prefill`, each sequence's whole context is instead one prefill chunk attending to itself (the model's tasks
// for it: one head each), and the rate is of queries.
// Usage: actord_attention_bench [threads] [sequences] [context] [heads_per_task (0: as the model)] [134m|stories260k]
//        [kv_dtype] [isa (auto, avx2, avx512, portable: the instance that runs)] [decode|prefill]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/isa_argument.hpp"
#include "core/kv_rows.hpp"
#include "core/large_buffer.hpp"

#include "executors/cpu/gemm.hpp"
#include "executors/cpu/kernels.hpp"
#include "executors/cpu/thread_pool.hpp"

using namespace actord;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int seqs = argc > 2 ? std::atoi(argv[2]) : 32;
  const int context = argc > 3 ? std::atoi(argv[3]) : 160;
  const bool stories = argc > 5 && std::string(argv[5]) == "stories260k";
  const int kLayers = stories ? 5 : 12, kHeads = stories ? 8 : 12, kKvHeads = stories ? 4 : 12;
  const int kHeadDim = stories ? 8 : 64, kBlock = 16;
  const auto named = argc > 6 ? parse_kv_dtype(argv[6]) : std::optional<DType>(stories ? DType::f32 : DType::bf16);
  if (!named) {
    std::fprintf(stderr, "unknown KV dtype '%s'\n", argv[6]);
    return 2;
  }
  const DType dtype = *named;
  const auto isa = bench::isa_argument(argc > 7 ? argv[7] : "auto");
  if (!isa) return 2;
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int n_blocks = seqs * blocks_per_seq;
  const int64_t head_stride = kv_head_stride(dtype, kBlock, kHeadDim), block_stride = head_stride * kKvHeads;
  const int64_t layer_elems = int64_t(n_blocks) * block_stride;
  std::mt19937 rng(1);
  // The cache as KvCache allocates it (huge pages), rows of values in [1, 2) as the model's writer stores them.
  LargeBuffer k_buffer(size_t(layer_elems * kLayers * esize)), v_buffer(size_t(layer_elems * kLayers * esize));
  auto* k = k_buffer.data();
  auto* v = v_buffer.data();
  std::uniform_real_distribution<float> value(1.0f, 2.0f);
  std::vector<float> row(kHeadDim);
  for (int64_t region = 0; region < int64_t(n_blocks) * kKvHeads * kLayers; ++region) {
    for (unsigned char* cache : {k, v}) {
      for (int slot = 0; slot < kBlock; ++slot) {
        for (float& e : row) e = value(rng);
        store_kv_row(dtype, row.data(), kHeadDim, kBlock, cache + region * head_stride * esize, slot);
      }
    }
  }
  std::vector<uint32_t> order(n_blocks);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);  // pages scattered, as after a while of serving
  const bool prefill = argc > 8 && std::string(argv[8]) == "prefill";
  const int queries = prefill ? context : 1;  // per sequence
  std::vector<float> q(size_t(seqs) * queries * kHeads * kHeadDim), out(q.size());
  std::uniform_real_distribution<float> q_value(-0.5f, 0.5f);
  for (float& e : q) e = q_value(rng);
  cpu::ThreadPool pool(threads);
  const int heads_per_task = prefill                                 ? 1
                             : argc > 4 && std::atoi(argv[4]) > 0 ? std::atoi(argv[4])
                                                                  : cpu::decode_heads_per_task(kHeads, kKvHeads, seqs, threads);
  const int tasks_per_seq = (kHeads + heads_per_task - 1) / heads_per_task;
  // EVICT_MB=N: before each layer the pool reads N / layers MB of other memory (untimed), as a decode step streams
  // a layer's weights between two attentions: K/V then come from DRAM, not from the caches.
  const char* evict_env = std::getenv("EVICT_MB");
  const size_t evict_bytes = evict_env ? size_t(std::atol(evict_env)) << 20 : 0;
  std::vector<uint64_t> evict(evict_bytes / sizeof(uint64_t), 1);
  std::atomic<uint64_t> evict_sink{0};
  double attention_seconds = 0;
  auto step = [&] {
    attention_seconds = 0;
    for (int l = 0; l < kLayers; ++l) {
      if (!evict.empty()) {
        const size_t slice = evict.size() / kLayers, part = slice / size_t(threads);
        pool.parallel_for(threads, [&](int t) {
          uint64_t sum = 0;
          const uint64_t* from = evict.data() + size_t(l) * slice + size_t(t) * part;
          for (size_t i = 0; i < part; i += 8) sum += from[i];
          evict_sink += sum;
        });
      }
      const auto t0 = std::chrono::steady_clock::now();
      pool.parallel_for(seqs * tasks_per_seq, [&](int task) {
        const int s = task / tasks_per_seq, h = task % tasks_per_seq * heads_per_task;
        cpu::PagedAttentionParams p;
        p.q = q.data() + size_t(s) * queries * kHeads * kHeadDim;
        p.out = out.data() + size_t(s) * queries * kHeads * kHeadDim;
        p.n_tokens = queries;
        p.start_pos = context - queries;
        p.n_heads = kHeads;
        p.n_kv_heads = kKvHeads;
        p.head_begin = h;
        p.head_end = std::min(kHeads, h + heads_per_task);
        p.head_dim = kHeadDim;
        p.block_size = kBlock;
        p.block_table = order.data() + size_t(s) * blocks_per_seq;
        p.k_base = k + l * layer_elems * esize;
        p.v_base = v + l * layer_elems * esize;
        p.kv_dtype = dtype;
        p.block_stride = block_stride;
        p.head_stride = head_stride;
        cpu::paged_attention(p, *isa);
      });
      attention_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  step();
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  int steps = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 3.0 || steps < 5) {
    step();
    best = std::min(best, attention_seconds);
    ++steps;
  }
  if (prefill) {
    // Causal: query i sees i + 1 keys; a key costs hd multiply-adds for its score and hd for its value.
    const double flops = 4.0 * seqs * kLayers * kHeads * kHeadDim * (double(context) * (context + 1) / 2);
    std::printf("%s: %s, threads %d, %d sequences x %d-token prefills, %s K/V: best step (all layers) %.3f ms, %.0f queries/s, %.1f GFLOP/s\n",
                stories ? "stories260k" : "134m", cpu::isa_name(*isa), threads, seqs, context, dtype_name(dtype),
                best * 1e3, seqs * double(context) / best, flops / best / 1e9);
    return 0;
  }
  const double bytes = double(seqs) * context * double(kv_bytes_per_token(dtype, kLayers, kKvHeads, kHeadDim));
  std::printf("%s: %s, threads %d, %d sequences x %d tokens, %d heads per task, %s K/V: best step %.3f ms, %.1f GB/s of K/V\n",
              stories ? "stories260k" : "134m", cpu::isa_name(*isa), threads, seqs, context, heads_per_task, dtype_name(dtype), best * 1e3,
              bytes / best / 1e9);
}
