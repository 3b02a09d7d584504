// A CPU worker rank for tests that run a model directly, without the engine: a thread pool and the CPU executor
// backend on it, and the load options that put a model's weights into that backend.
#pragma once

#include <filesystem>

#include "executors/cpu/cpu_backend.hpp"
#include "executors/cpu/thread_pool.hpp"
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

}  // namespace actord::test
