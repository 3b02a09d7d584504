// Helpers for tests that run a model directly, without the engine: a CPU worker rank (a thread pool and the CPU
// executor backend on it, and the load options that put a model's weights into that backend), a KV cache in a
// backend's memory, and greedy decoding from BOS.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <vector>

#include "executors/cpu/cpu_backend.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model.hpp"
#include "plugins/weight_store.hpp"

namespace actord::test {

struct CpuRank {
  explicit CpuRank(int threads = 2, cpu::Isa isa = cpu::Isa::automatic) : pool(threads), backend(pool, isa) {}
  // Options for a model of `dir` loaded into this rank's backend.
  ModelLoadOptions load(const std::filesystem::path& dir) {
    ModelLoadOptions options;
    options.model_dir = dir;
    options.backend = &backend;
    return options;
  }
  cpu::ThreadPool pool;
  cpu::CpuBackend backend;
};

// A KV cache in `backend`'s device memory, or in host memory when the backend computes there.
inline std::unique_ptr<KvCache> kv_cache_on(exec::Backend& backend, int layers, int kv_heads, int head_dim,
                                            int blocks, int block_size, DType dtype) {
  auto device = backend.allocate_device_bytes(KvCache::bytes_for(layers, kv_heads, head_dim, blocks, block_size, dtype));
  REQUIRE(device.ok());
  if (!*device) return std::make_unique<KvCache>(layers, kv_heads, head_dim, blocks, block_size, dtype);
  KvStorage storage{(*device)->data, (*device)->owner,
                    [&backend](void* dst, const void* src, size_t n) { backend.copy_bytes(dst, src, n); }};
  return std::make_unique<KvCache>(layers, kv_heads, head_dim, blocks, block_size, dtype, std::move(storage));
}

// `steps` greedy tokens from BOS, one token per step through `kv` at the blocks `table` lists.
inline std::vector<int32_t> greedy_from_bos(Model& model, KvCache& kv, exec::Backend& backend,
                                            const std::vector<uint32_t>& table, int steps) {
  Sampler sampler;
  std::vector<float> logits;
  std::vector<int32_t> generated;
  int32_t next = 1;
  for (int pos = 0; pos < steps; ++pos) {
    ForwardBatch batch;
    batch.tokens = {next};
    batch.seqs = {SeqSlice{0, 1, pos, table.data(), true}};
    REQUIRE(model.forward(batch, kv, logits, backend));
    next = sampler.sample(logits.data(), model.config().vocab_size, SamplingOptions{0.0f, 1.0f, 0, 0}, pos);
    generated.push_back(next);
  }
  return generated;
}

}  // namespace actord::test
