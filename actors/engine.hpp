// actord's embedding API: start the actors of a topology, generate text, stop. Used by the CLI, the tests and
// anyone embedding the engine in a C++ program.
//
// Contract: CAF-free header. start() validates the model folder and the topology against it, brings every actor up
// (spawning worker processes where the topology says so) and returns an Error (never aborts) when anything is
// wrong: missing model folder, unsupported architecture, bad weights, a worker that dies at start-up. generate() is
// thread-safe; requests passed together are submitted together and batched by the scheduler. Per-request problems
// (a prompt longer than the context) come back in GenerateOutput::error; the engine keeps serving. The destructor
// stops every actor and worker process it started.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/stream_event.hpp"
#include "core/topology_config.hpp"
#include "core/sampling_options.hpp"
#include "core/scheduler_stats.hpp"
#include "plugins/model_config.hpp"

namespace actord {

class Tokenizer;

struct EngineOptions {
  std::filesystem::path worker_executable;  // for placement: process; empty: this process's own executable
  std::string log_level = "warn";           // passed on to worker processes
  std::chrono::seconds worker_start_timeout{120};
  // Memory the workers may take (bytes); unset: what this machine has available now (MemAvailable). Weights, KV
  // pool and swap space beyond it are refused at start with an error naming the key.
  std::optional<uint64_t> available_memory;
  // --trace: every step of every rank is traced and written there as Chrome trace JSON when the engine stops
  // (actors/trace_sink.hpp); empty: off.
  std::filesystem::path trace_path;
};

struct GenerateRequest {
  std::optional<std::string> prompt;  // encoded by the tokenizer actor (with BOS) when set
  std::vector<int32_t> prompt_ids;    // used as is when prompt is not set
  uint32_t max_tokens = 16;
  SamplingOptions sampling;           // seed 0 with temperature > 0: a seed is drawn per request (n samples:
                                      // sample i draws with that seed + i)
  bool ignore_eos = false;
  std::vector<std::string> stop;      // generation ends at the first of these in the text, which is not emitted
  int32_t priority = 0;               // with scheduler.policy priority: lower runs first, and may preempt
  uint32_t lora = 0;                  // 0: the base model; k: lora.modules' k-th adapter (Engine::lora_adapter)
};

struct GenerateOutput {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string text;                   // the detokenized generated ids
  std::string finish_reason;          // stop (a stop id or stop string) | length | error | cancelled
  std::optional<Error> error;
  double ttft_ms = 0;                 // submit -> first token
  double decode_tokens_per_s = 0;     // (generated - 1) / (last token - first token)
  double total_ms = 0;
  std::vector<TokenLogprobs> logprobs;  // one per generated id when sampling.logprobs >= 0
  // With sampling.prompt_logprobs >= 0: one per prompt token from the second on (position 1 .. prompt length - 1),
  // the same for every sample of a request.
  std::vector<TokenLogprobs> prompt_logprobs;
  size_t request_index = 0;           // the GenerateRequest this is a sample of
  uint32_t sample_index = 0;          // which of its sampling.n samples (drawn with seed + sample_index)

  // Adds one event of this sample (Engine::submit): prompt ids, tokens, text, logprobs, error, finish reason.
  void add(const StreamEvent& event);
};

// Totals of the replicas' schedulers since the engine started (core/scheduler_stats.hpp): summed over the
// replicas (those removed or rebuilt count with what they had done when last asked).
using EngineStats = SchedulerStats;

// One data parallel replica as the coordinator sees it.
struct ReplicaInfo {
  int index = 0;                     // replica/INDEX
  std::string state;                 // starting | serving | draining | rebuilding | failed
  uint32_t incarnation = 0;          // one more each time it was rebuilt after losing a rank
  std::vector<std::string> ranks;    // rank names, stage-major
  std::vector<int32_t> pids;         // of each rank (this process's for thread ranks); 0 until ready
  std::string last_failure;          // why it was last rebuilt
  std::string shape;                 // "tp2 pp1, processes", "afd 1:2, processes"...
  std::vector<std::string> nodes;    // each rank's node, "" for this machine
  std::string group;                 // its group's name
  std::string role;                  // its group's role (prefill/decode disaggregation): both | prefill | decode
};

struct FleetInfo {
  std::string group;                 // the first group's name (each replica names its own)
  std::vector<ReplicaInfo> replicas;
  uint32_t replacements = 0;         // rebuilds after a lost rank since the start
  bool scaling = false;              // a scale or an apply is being carried out
  std::string change;                // an apply's current step
  std::string router_prefill;        // the router's policy for requests in their prefill phase (least_tokens...)
  std::string router_decode;         // and in their decode phase (groups[].router, core/route_policy.hpp)
  std::vector<std::string> autoscale;  // each autoscaled group's last look at its load (groups[].autoscale)
};

using TextCallback = std::function<void(size_t output_index, std::string_view text_delta)>;

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> start(const TopologyConfig& topology, const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& model_config() const;
  int max_model_len() const;
  const std::filesystem::path& model_dir() const;
  std::shared_ptr<const Tokenizer> tokenizer() const;  // immutable: any thread may encode and decode with it
  // The LoRA adapters it serves (lora.modules, in order), and the GenerateRequest::lora of one by name. Thread-safe.
  std::vector<LoraModule> lora_modules() const;
  std::optional<uint32_t> lora_adapter(const std::string& name) const;

  Result<std::vector<int32_t>> tokenize(const std::string& text, bool add_special_tokens = true);
  // Blocks until every request has finished. Returns one output per sample: a request of sampling.n samples
  // gives n consecutive outputs (their prompt's KV computed once and shared). A client of submit(): on_text, when
  // set, is called on an engine thread, one call at a time, and receives text
  // deltas as they are produced, with the output's index.
  Result<std::vector<GenerateOutput>> generate(const std::vector<GenerateRequest>& requests,
                                               const TextCallback& on_text = {});
  // Submits one request and returns its id at once (sample i is id + i): on_event is called for every delta of
  // its samples, on an engine thread, one call at a time, until each has finished (StreamEvent::finish_reason).
  // For front ends that stream (the HTTP server); thread-safe.
  uint64_t submit(const GenerateRequest& request, StreamCallback on_event);
  // Cancels every sample of a submitted request still running; their final events say cancelled.
  void cancel(uint64_t request_id);
  size_t num_in_flight() const;  // submitted requests not finished yet
  Result<EngineStats> stats();

  // Data parallel resize while serving: the group gets `replicas` replicas. Added ones start as at start-up and
  // take requests once all are ready; removed ones (the highest-numbered) drain: no new requests, waiting ones go
  // to the others, running ones finish. A group placed on nodes is laid out as its placement spreads `replicas`
  // replicas: each one added goes to a slot no replica holds, and one left without a slot drains. Returns when
  // done. Refused, changing nothing: an unknown group, replicas < 1 or outside the group's autoscale bounds, more
  // ranks than the machine's cores (without groups[].oversubscribe) or its memory (for the ranks added here), a
  // scale in progress.
  Status scale(const std::string& group, int replicas);
  // actord apply: each running group, one after another, takes the shape of the group of the same place in the
  // topology `yaml` (parsed as a file at `source`, its relative paths against that file's folder): tp, pp, ep, afd,
  // tbo, micro_batches, link, threads, cpu_isa, router and replicas may all change. Make before break: replicas of
  // the new shape start while the old ones serve and take the requests once ready, then the old ones hand their
  // sequences over (running ones continue from their tokens so far, recomputed or with their KV) and stop. A
  // failed step rolls back every group changed so far. A group autoscaled before and after keeps the replicas it has
  // (within the new bounds), not the file's count. Returns when done, with what it did per group. Refused,
  // changing nothing, with the key: malformed YAML, any change outside the groups and engine.max_num_seqs /
  // max_num_batched_tokens (the new replicas' schedulers take those) (model, the rest of engine, scheduler, nodes,
  // plugins: they need a restart; the server section, read once by serve, is not looked at), a group added,
  // removed, renamed or of another role, a topology the model or the machine (cores, the memory one group's new
  // replicas need beside the old) cannot take, a resize in progress.
  Result<std::string> apply(const std::string& yaml, const std::filesystem::path& source);
  // A LoRA adapter loaded while serving (vLLM's /v1/load_lora_adapter): the running topology with the PEFT folder
  // `path` appended to lora.modules as `name`, applied as apply() applies a topology (a rolling replacement; no
  // request lost). Requests may name it once this returns. An error names lora_name or the adapter's file and key.
  Result<std::string> add_lora_adapter(const std::string& name, const std::filesystem::path& path);
  Result<FleetInfo> fleet();

 private:
  Result<std::string> reshape_to(const TopologyConfig& file, const std::filesystem::path& source,
                                 const std::string& yaml);
  // Takes each group's replicas in the running topology from the coordinator's count (autoscaling changes them).
  Status count_replicas();
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace actord
