// A test model plugin: "StallingLlamaForCausalLM", a Llama that stalls. Its forward pass sleeps for config.json's
// `stall_ms` whenever the step carries the token id `stall_token` (only the first `stall_times` times in this process
// when config.json has it), then runs as a Llama. It stands for a worker
// that stops answering in the middle of a step (a hang, a livelock, a GPU that stopped) while its process is alive,
// which only the scheduler's step deadline can catch. With `abort_token`, a step carrying that id aborts the process
// instead (a request that kills every worker it reaches). Loaded through a topology's `plugins:` like any plugin.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "plugins/plugin_api.hpp"
#include "plugins/transformer/transformer_model.hpp"

namespace {

std::atomic<int64_t> stalls_left{-1};  // -1: no limit

class StallingModel final : public actord::Model {
 public:
  StallingModel(std::unique_ptr<actord::Model> inner, int32_t token, int stall_ms, int32_t abort_token)
      : inner_(std::move(inner)), token_(token), stall_ms_(stall_ms), abort_token_(abort_token) {}
  const actord::ModelConfig& config() const override { return inner_->config(); }
  actord::KvShape kv_shape() const override { return inner_->kv_shape(); }
  actord::Status forward(const actord::ForwardBatch& batch, actord::KvCache& kv, std::vector<float>& logits,
                         const actord::ForwardContext& context) override {
    if (abort_token_ >= 0 && std::find(batch.tokens.begin(), batch.tokens.end(), abort_token_) != batch.tokens.end()) {
      const rlimit no_core{0, 0};  // a test's crash leaves no core file behind
      setrlimit(RLIMIT_CORE, &no_core);
      std::abort();
    }
    if (std::find(batch.tokens.begin(), batch.tokens.end(), token_) != batch.tokens.end()) {
      int64_t left = stalls_left.load();
      while (left != 0 && !stalls_left.compare_exchange_weak(left, left < 0 ? left : left - 1)) {
      }
      if (left != 0) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms_));
    }
    return inner_->forward(batch, kv, logits, context);
  }

 private:
  std::unique_ptr<actord::Model> inner_;
  int32_t token_;
  int stall_ms_;
  int32_t abort_token_;
};

actord::Result<std::unique_ptr<actord::Model>> create(const actord::ModelConfig& config,
                                                      const actord::ModelLoadOptions& options) {
  std::ifstream in(options.model_dir / "config.json");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("stall_token") || !j.contains("stall_ms")) {
    return actord::make_error(actord::Errc::parse_error, "StallingLlamaForCausalLM: needs stall_token and stall_ms");
  }
  if (j.contains("stall_times") && stalls_left.load() < 0) stalls_left = j["stall_times"].get<int64_t>();
  auto inner = actord::TransformerModel::create(config, options, actord::transformer_spec_from_config(config));
  if (!inner) return inner.error();
  return std::unique_ptr<actord::Model>(
      new StallingModel(std::move(*inner), j["stall_token"].get<int32_t>(), j["stall_ms"].get<int>(),
                        j.value("abort_token", int32_t{-1})));
}

int register_models(actord::ModelRegistry& registry) {
  registry.add("StallingLlamaForCausalLM", &create);
  return 0;
}

}  // namespace

ACTORD_PLUGIN(register_models)
