// What a worker does, without the actor around it: load a model shard and its KV memory (WorkerInit), then
// execute steps (ExecuteStep -> StepResult). The same code serves a worker actor in the engine's process and one
// in a worker process behind ZeroMQ.
//
// Contract: not thread-safe (one worker actor owns it). Never throws on bad input: a failed init or a malformed
// step comes back as a WorkerReady / StepResult carrying an Error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comms/wire_msg.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_registry.hpp"

namespace actord {

class WorkerCore {
 public:
  // Takes a copy of the registry: plugins named in WorkerInit are added to the copy.
  explicit WorkerCore(ModelRegistry registry) : registry_(std::move(registry)) {}

  wire_msg init(const wire_msg& worker_init);     // WorkerInit -> WorkerReady
  wire_msg execute(const wire_msg& execute_step);  // ExecuteStep -> StepResult

  const std::string& name() const { return name_; }

 private:
  ModelRegistry registry_;
  std::string name_ = "worker";
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<cpu::ThreadPool> pool_;
  Sampler sampler_;
  ForwardBatch batch_;                           // reused across steps
  std::vector<std::vector<uint32_t>> tables_;    // [n_seqs] block tables of the current step
  std::vector<float> logits_;                    // [n_sampled, vocab]
};

}  // namespace actord
