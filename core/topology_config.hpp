// The topology file (configs/*.yaml): one plain struct per section, parsed and validated once.
//
// Contract: load_topology() reads the YAML, applies `--set` overrides and a `--model` override, and validates every
// key. Every error names its path in the file, e.g. "configs/q.yaml: engine.block_size: must be a power of two
// between 1 and 256, got 3" or "configs/q.yaml: engine.max_num_seq: unknown key (known keys: ...)". Relative
// model paths in the file are resolved against the file's folder; a --model override against the working directory.
// What needs the model (tp against the heads, pp against the layers) or the machine (threads against its cores) is
// checked by core/topology_plan.hpp; what is not built yet (several groups, nodes) is refused by Engine::start.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/lora_module.hpp"
#include "core/route_policy.hpp"
#include "core/status.hpp"

namespace actord {

struct ModelSection {
  std::filesystem::path path;
  std::string dtype = "auto";        // auto keeps the stored dtype | float32 | bfloat16 | float16
  std::string load_format = "auto";  // auto (safetensors) | dummy (random weights of the configured shape)
  uint64_t seed = 0;                 // dummy weights
  // Weight-only quantization made at load time from the file's f32/bf16/f16 matrices: none | int8 | int4, with
  // input features per scale (0: per channel for int8, 32 for int4) and, for int4, zero points (asymmetric).
  std::string quantization = "none";
  int quantization_group = 0;
  bool quantization_zero_points = false;
};

struct ServerSection {
  std::string host = "127.0.0.1";
  int port = 8000;                          // 0: any free port (printed at start)
  std::string api_key;                      // empty: none (ACTORD_API_KEY and --api-key also set it)
  uint64_t max_request_body = 1ull << 20;   // bytes; larger bodies get 413
  int shutdown_timeout_s = 30;              // SIGTERM/SIGINT: seconds for requests in flight to finish
  int max_queued_requests = 4096;           // requests in flight (running or waiting) beyond which new ones get 429
  std::string tool_call_parser = "auto";    // how the model writes tool calls: auto (from its chat template),
                                            // hermes, mistral or llama3_json (api/openai_tools.hpp)
  std::string reasoning_parser = "auto";    // auto: chat replies split into reasoning_content and content where
                                            // the chat template writes <think>; none: never (api/openai_reasoning.hpp)
};

struct EngineSection {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  uint64_t kv_cache_memory = 256ull << 20;  // bytes of KV cache per worker
  int max_model_len = 0;                    // 0: the model's max_position_embeddings
  // auto: the model's compute dtype (model.dtype, else config.json's torch_dtype) | float32 | bfloat16 | float16
  std::string kv_cache_dtype = "auto";
  bool enable_prefix_caching = true;        // reuse the KV of cached full blocks of identical token prefixes
  // How a running sequence makes room when KV blocks run out: recompute (free its blocks, prefill it again later)
  // or swap (copy its KV blocks to host memory and back, byte-exact; recompute when swap_space is full).
  std::string preemption_mode = "recompute";
  uint64_t swap_space = 4ull << 30;         // bytes of host memory for swapped-out KV blocks (preemption_mode: swap)
  // How the running sequences of a replica that a reshape (actord apply) replaces continue: move (with their KV
  // blocks, re-laid out for the new shape) or recompute (prefilled again from their tokens).
  std::string reshape_kv = "move";
  // A worker that stops answering is declared failed when a step's result is this much later than its expected
  // compute time, or when a worker process sends no heartbeat for this long.
  std::chrono::milliseconds step_timeout{2000};
  // The longest wait between attempts to rebuild a lost replica whose rebuilds keep failing (its node is down): the
  // first three come 1 s apart, then the wait doubles up to this; the replica is never given up.
  std::chrono::milliseconds rebuild_retry_max{30000};
  // Which CPUs the worker processes on this machine run on (core/host_cpus.hpp): each rank (the stages of a
  // replica's tp rank together: they take turns) gets as many CPUs of the engine's affinity mask as it has threads,
  // to itself. auto: only when the ranks' threads add up to every CPU the engine may use (threads 0, or a topology
  // that fills the machine); bind: whenever enough CPUs are free; none: never (the kernel places the threads).
  // Ranks that are threads of the engine's process and ranks on other nodes are not bound.
  std::string cpu_binding = "auto";
};

struct SchedulerSection {
  std::string policy = "fcfs";
  bool plan_ahead = true;  // plan step N+1 while step N executes (two steps in flight)
};

// Speculative decoding (scheduler/batch_scheduler.hpp): draft tokens verified by the step that decodes them, so
// that a sequence may gain several tokens a step, the same tokens as without drafts. vLLM's names.
struct SpeculativeSection {
  std::string method = "none";     // none | ngram (prompt lookup: drafts from the sequence's own earlier tokens)
  int num_speculative_tokens = 4;  // drafts per sequence and step at most
  int prompt_lookup_min = 2;       // n-gram lengths matched (ngram)
  int prompt_lookup_max = 4;
  // No drafts while this many sequences or more run (0: at any batch size): verifying drafts costs compute, which
  // decode has to spare only while the weights' memory traffic bounds it (small batches).
  int disable_by_batch_size = 8;
  bool enabled() const { return method != "none"; }
  bool operator==(const SpeculativeSection&) const = default;
};

// LoRA adapters (plugins/lora_adapter.hpp) served beside the base model: a request names one as its model
// (OpenAI's `model` field, as vLLM's --lora-modules). Every worker holds every adapter (they are small).
struct LoraSection {
  std::vector<LoraModule> modules;  // in the file's order: request adapter k is modules[k - 1]
  int max_lora_rank = 64;           // adapters of a larger r are refused
  bool operator==(const LoraSection&) const = default;
};

// Where a group's ranks run: threads of the engine's process, worker processes the engine starts on this machine,
// or worker processes on the nodes `placement_nodes` names (started there by the node's agent).
enum class Placement { thread, process, node };
const char* placement_name(Placement placement);  // "thread" | "process" | "node"

// The name of this machine among the nodes; it is implicit (never listed under `nodes:`).
inline constexpr const char* kLocalNode = "local";

// A machine of the fleet other than this one (`nodes:`).
struct NodeSection {
  std::string name;     // [A-Za-z0-9_.-]+, unique, not "local"
  std::string address;  // tcp://HOST:PORT, where the node's agent is reached
};

inline constexpr int kMaxGroupDimension = 4096;  // the most replicas, tp or pp a group may have

// A link model for research runs (groups[].link): no collective operation of the group's ranks, and no receive of
// a message, completes earlier than `latency` + its bytes / `bytes_per_second` after the last rank arrived at it
// (after it started, for a receive and over ZeroMQ; the time the backend does not take is slept: the CPU is free
// meanwhile), so communication can be studied on one machine.
// Zero: no model.
struct LinkModel {
  std::chrono::nanoseconds latency{0};
  uint64_t bytes_per_second = 0;  // 0: unlimited
  bool active() const { return latency.count() > 0 || bytes_per_second > 0; }
  bool operator==(const LinkModel&) const = default;
};

// Attention-FFN disaggregation (groups[].afd): each replica's attention and its FFNs run on separate pools. The
// attention pool is `attention_workers` ranks in attention_workers / tp lanes of tp ranks (the group's tp), each
// lane with its own sequences and KV cache (as attention data parallel lanes); the FFN pool is `ffn_workers` ranks
// holding every layer's FFN: a dense MLP split along its intermediate features over them, or an MoE layer's experts
// sharded over them (whole experts). In every layer the attention ranks send their tokens' hidden states to the
// FFN ranks and take the outputs back (one all-to-all each way over the replica's EP group: the attention ranks,
// then the FFN ranks).
struct AfdSection {
  int attention_workers = 0;  // 0: no disaggregation
  int ffn_workers = 0;
  bool active() const { return ffn_workers > 0; }
  bool operator==(const AfdSection&) const = default;
};

// groups[i].autoscale: the coordinator sizes the group from its load, between min_replicas and max_replicas
// (scheduler/autoscaler.hpp says how); the group's `replicas` is the count it starts with (min_replicas when unset).
struct AutoscaleSection {
  int min_replicas = 0;
  int max_replicas = 0;  // 0: no autoscale
  // Sequences (running + waiting) one replica should hold; the group wants ceil(its sequences / this) replicas.
  // 0: half of engine.max_num_seqs.
  int target_sequences = 0;
  // Tokens still to prefill (prompts, recomputed sequences) one replica should hold; when set, the group also wants
  // ceil(its backlog / this) replicas (the larger of the two counts). 0: not a signal.
  int64_t target_prompt_tokens = 0;
  // How long the group must want more (fewer) replicas, at every look, before they are added (retired).
  std::chrono::milliseconds scale_up_after{5000};
  std::chrono::milliseconds scale_down_after{60000};
  std::chrono::milliseconds interval{1000};  // between two looks at the group's load
  bool active() const { return max_replicas > 0; }
  bool operator==(const AutoscaleSection&) const = default;
};

struct GroupSection {
  std::string name = "main";         // [A-Za-z0-9_.-]+, unique among the groups: the first part of its ranks' names
  int replicas = 1;                  // data parallel: identical copies of the model, each with its own scheduler
  int tp = 1;                        // tensor parallel ranks of one pipeline stage
  int pp = 1;                        // pipeline stages of one replica
  // Expert parallel: 1, tp (the experts of every MoE layer are sharded over a stage's tp ranks, whole experts
  // per rank, while attention and dense layers stay TP-sharded; tokens travel to their experts by all-to-all), or
  // a multiple of tp with pp 1: attention data parallel, ep / tp lanes of tp ranks each, every lane with its own
  // sequences and KV cache, the experts sharded over all ep ranks of the replica (lanes()).
  int ep = 1;
  // EPLB (ep > 1): extra expert slots per rank, filled with copies of hot experts; and every how many steps the
  // scheduler recomputes the placement from the tokens each expert got since the last time (0: never, the initial
  // placement stays: core/expert_placement.hpp).
  int num_redundant_experts = 0;
  int eplb_step_interval = 0;
  // cpu | cuda. A cuda rank runs on one GPU of its machine: the one its index among the group's ranks there picks
  // (modulo the machine's GPUs); its KV cache is in that GPU's memory, its swap space on the host.
  std::string device = "cpu";
  Placement placement = Placement::thread;
  // With Placement::node: the nodes ("local" or a nodes[] name) the group's units (units(): replica stages, or
  // with attention data parallel lanes, replica lanes; replica-major) are spread over, in order, as evenly as
  // possible (earlier nodes take the extra); the tp ranks of one unit always share a node. One entry for
  // `placement: node:NAME`. Empty for thread and process.
  std::vector<std::string> placement_nodes;
  int threads = 0;                   // CPU threads per rank; 0: this machine's cores shared among its ranks
  // Let the ranks on this machine use more threads than it has cores (each rank gets at least one); refused
  // otherwise (core/topology_plan.hpp's check_threads_fit).
  bool oversubscribe = false;
  // Instruction set of the workers' CPU kernels: auto (the best the CPU runs) | portable | avx2 | avx512. A worker
  // refuses at start one its CPU lacks.
  std::string cpu_isa = "auto";
  // How the group's router spreads requests over its replicas: least_tokens (fewest outstanding tokens) |
  // round_robin | prefix_affinity (a prompt's leading blocks go where they went before: that replica's prefix
  // cache has them). scheduler/replica_router.hpp.
  std::string router = "least_tokens";
  // Prefill/decode disaggregation (core/route_policy.hpp): both | prefill | decode. A prefill group needs a group
  // that decodes (decode or both) and a decode group one that prefills. One router serves every group with one
  // policy per phase: groups serving requests in the same phase name the same `router` (a prefill group and a
  // decode group may differ).
  ReplicaRole role = ReplicaRole::both;
  LinkModel link;  // `link: {latency: 200us, bandwidth: 10GB/s}`
  // Two-batch overlap: each step's batch runs as `micro_batches` (2 unless set) micro-batches of whole sequences,
  // balanced by tokens, on threads of each rank taking turns to compute, so that one's collectives wait while
  // another computes (each micro-batch has its own collective groups). Outputs are the same as without.
  bool tbo = false;
  // tbo: auto — the scheduler splits a step only where splitting was measured faster for steps of its size
  // (scheduler/overlap_chooser.hpp); tbo is then true (the ranks are ready for either).
  bool tbo_auto = false;
  int micro_batches = 2;
  static constexpr int kMaxMicroBatches = 8;
  AfdSection afd;  // `afd: {attention: {workers: A, tp: T}, ffn: {workers: F}}`; tp is then T, pp and ep 1
  AutoscaleSection autoscale;  // `autoscale: {min_replicas: 1, max_replicas: 4}`

  // Attention data parallel lanes of a replica: its attention pool's workers / tp with AFD, ep / tp when ep is a
  // larger multiple of tp, else 1.
  int lanes() const {
    if (afd.active()) return afd.attention_workers / tp;
    return ep > tp && ep % tp == 0 ? ep / tp : 1;
  }
  // Whether the replica's ranks share an EP group beyond its TP group: attention lanes or AFD.
  bool ep_group() const { return lanes() > 1 || afd.active(); }
  // Ranks of one replica: tp x pp x lanes, + the FFN pool with AFD.
  int ranks_per_replica() const { return tp * pp * lanes() + afd.ffn_workers; }
  // What placement_nodes spreads: replicas x pp x lanes (lanes > 1 only with pp 1), with AFD replicas x (lanes +
  // FFN workers): each replica's lanes, then its FFN workers.
  int units() const { return replicas * (pp * lanes() + afd.ffn_workers); }
  // The unit of replica r's lane (or stage) `part`, and of its FFN worker f.
  int unit_of(int replica, int part) const { return replica * (pp * lanes() + afd.ffn_workers) + part; }
  int ffn_unit_of(int replica, int f) const { return unit_of(replica, pp * lanes() + f); }
  bool operator==(const GroupSection&) const = default;
};

struct TopologyConfig {
  std::filesystem::path source;  // the YAML file it came from
  ModelSection model;
  ServerSection server;
  EngineSection engine;
  SchedulerSection scheduler;
  SpeculativeSection speculative;
  LoraSection lora;
  std::vector<NodeSection> nodes;  // besides the implicit local node
  std::vector<GroupSection> groups;
  std::vector<std::filesystem::path> plugins;  // shared libraries (plugins/plugin_api.hpp), resolved like model.path
};

struct TopologyOverrides {
  std::vector<std::string> set;               // "dotted.key=value", e.g. "engine.max_num_seqs=8", "groups[0].tp=2"
  std::optional<std::filesystem::path> model;  // replaces model.path
};

// The router's policy for each phase of a validated topology: the `router` of the first group serving it (all of
// them name the same one); groups[0]'s for a phase no group serves.
PhasePolicies phase_policies(const TopologyConfig& topology);

// The topology with each autoscaled group at its max_replicas, where the autoscaler may grow it without asking
// (Engine::start, apply and actord check plan it against the machine too), and how to name a refusal of it:
// "<source>: groups[i].autoscale.max_replicas: at N replicas, <the refusal's own words>" (the first group grown).
struct AutoscaleCeiling {
  TopologyConfig topology;
  std::string key;  // "groups[i].autoscale.max_replicas: at N replicas, "
  Error refusal(const Error& inner) const;
};
// Nothing when no group can grow beyond its replicas.
std::optional<AutoscaleCeiling> autoscale_ceiling(const TopologyConfig& topology);

Result<TopologyConfig> load_topology(const std::filesystem::path& file, const TopologyOverrides& overrides = {});
Result<TopologyConfig> parse_topology(const std::string& yaml_text, const std::filesystem::path& source,
                                      const TopologyOverrides& overrides = {});

// "256MiB", "1GiB", "512KB", "1048576" -> bytes.
Result<uint64_t> parse_byte_size(const std::string& text);
// "2s", "500ms", "1.5s", "2m", "100us" (rounded up to whole milliseconds), or a plain number of seconds; refuses
// negative, non-finite and overflowing values.
Result<std::chrono::milliseconds> parse_duration(const std::string& text);
// The same without rounding, to the nanosecond ("200us", "1.5ms").
Result<std::chrono::nanoseconds> parse_fine_duration(const std::string& text);
// A rate of bytes per second: a size (parse_byte_size) followed by "/s" ("10GB/s", "2GiB/s").
Result<uint64_t> parse_byte_rate(const std::string& text);

}  // namespace actord
