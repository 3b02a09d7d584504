// A WorkerCore on the bundled stories260K for tests that drive a worker's messages directly (no actor, no engine).
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>

#include "actors/worker_core.hpp"
#include "comms/capnp_codec.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"

namespace actord::test {

// 16 KV blocks of 4 tokens in f32, `swap_blocks` blocks of host swap space, one thread; fails the test if it does not
// come up. (A CPU backend reads ACTORD_CPU_RUN_AHEAD as it is made: set it around this call to run ahead.)
inline std::unique_ptr<WorkerCore> stories_worker_core(uint32_t swap_blocks = 0) {
  auto core = std::make_unique<WorkerCore>(ModelRegistry::with_builtins());
  const wire_msg ready = core->init(build<wire::WorkerInit>([&](wire::WorkerInit::Builder out) {
    out.setName("w");
    out.setModelPath(stories_dir().string());
    out.setNumKvBlocks(16);
    out.setBlockSize(4);
    out.setKvDtype("F32");
    out.setNumSwapBlocks(swap_blocks);
    out.setThreads(1);
  }));
  WireReader reader(ready);
  REQUIRE_FALSE(has_error(reader.root<wire::WorkerReady>().getError()));
  return core;
}

}  // namespace actord::test
