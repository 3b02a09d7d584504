// Helpers for tests that run the whole engine: a bundled topology with --set overrides, and an engine started
// with the built actord binary as its worker executable (placement: process).
#pragma once

#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "core/topology_config.hpp"
#include "test_util.hpp"

namespace actord::test {

// configs/<file> with `set` applied (as `--set` does); fails the test if it does not load.
inline TopologyConfig quickstart(const std::string& file = "configs/quickstart.yaml",
                                 std::vector<std::string> set = {}) {
  TopologyOverrides o;
  o.set = std::move(set);
  auto cfg = load_topology(source_dir() / file, o);
  REQUIRE(cfg.ok());
  return *cfg;
}

inline EngineOptions engine_options() {
  EngineOptions o;
  o.worker_executable = actord_binary();
  return o;
}

// Starts an engine or fails the test with the start-up error.
inline std::unique_ptr<Engine> start_engine(const TopologyConfig& cfg) {
  auto engine = Engine::start(cfg, engine_options());
  if (!engine) FAIL(engine.error().message);
  return std::move(*engine);
}

// Generates `requests` and, once the first text has streamed (sequences are running), calls `during` on this
// thread; the outputs when all finished.
template <class During>
Result<std::vector<GenerateOutput>> generate_while(Engine& engine, const std::vector<GenerateRequest>& requests,
                                                   During&& during) {
  std::promise<void> streaming;
  std::atomic<bool> signalled{false};
  auto run = std::async(std::launch::async, [&] {
    return engine.generate(requests, [&](size_t, std::string_view) {
      if (!signalled.exchange(true)) streaming.set_value();
    });
  });
  streaming.get_future().wait();
  during();
  return run.get();
}

// One short request completes without an error.
inline void check_serves(Engine& engine) {
  GenerateRequest r;
  r.prompt = "Once upon a time";
  r.max_tokens = 8;
  auto out = engine.generate({r});
  REQUIRE(out.ok());
  CHECK_FALSE((*out)[0].error);
}

// Decode tokens (one per sequence continuing its output) fed in steps that also carried prompt tokens: > 0 shows
// chunked prefill mixed with decode. tokens - prefill_tokens are the decode slices of every step, decode_tokens
// those of decode-only steps (one sample each: requests of one sample). Read once the requests finished.
inline int64_t decode_tokens_in_mixed_steps(const EngineStats& s) {
  return static_cast<int64_t>(s.tokens - s.prefill_tokens) - static_cast<int64_t>(s.decode_tokens);
}

// stories260K requests whose greedy continuation is known: request i is prompted with BOS and the first 13 i tokens
// of its 256-token reference and asks for 20 + 7 i % 40 tokens (ignoring EOS), so it must continue with the
// reference's next ones. 16 of them share their prefixes (prefix cache hits, copy-on-write) and end at different
// steps.
inline std::vector<GenerateRequest> reference_prefix_requests() {
  const std::vector<int32_t> reference = reference_ids();
  std::vector<GenerateRequest> out;
  for (size_t i = 0; i < 16; ++i) {
    GenerateRequest q;
    q.prompt_ids = {1};
    q.prompt_ids.insert(q.prompt_ids.end(), reference.begin(), reference.begin() + std::ptrdiff_t(13 * i));
    q.max_tokens = uint32_t(20 + (i * 7) % 40);
    q.sampling.temperature = 0.0f;
    q.ignore_eos = true;
    out.push_back(q);
  }
  return out;
}

// The first `count` outputs of reference_prefix_requests() (or a list that begins with them) continue the reference.
inline void check_continues_reference(const std::vector<GenerateOutput>& outputs,
                                      const std::vector<GenerateRequest>& asked, size_t count) {
  const std::vector<int32_t> reference = reference_ids();
  REQUIRE(outputs.size() >= count);
  for (size_t i = 0; i < count; ++i) {
    INFO("prefix of " << 13 * i << " tokens");
    if (outputs[i].error) FAIL(outputs[i].error->message);
    const auto from = reference.begin() + std::ptrdiff_t(13 * i);
    CHECK(outputs[i].generated_ids == std::vector<int32_t>(from, from + asked[i].max_tokens));
  }
}

}  // namespace actord::test
