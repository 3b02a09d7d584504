// The resolved plan of a topology for a model: every rank of every group and replica, where it runs, which layers,
// heads and vocabulary rows it holds, and the memory it asks for. Made and checked before anything starts
// (`actord check` prints it); TP/PP/DP execution builds its ranks from it.
//
// Contract: pure functions of their arguments (the machine's cores are one: core/host_cpus.hpp reads them). Errors
// are Errc::invalid_config and name the topology file, the key path and the rule, e.g.
// "configs/t.yaml: groups[0].tp: must divide num_attention_heads (8), got 3".
//
// Sharding follows the WeightSpec kinds the transformer plugins declare (plugins/weight_spec.hpp), as vLLM shards:
// q/k/v and gate/up split by output columns (heads, intermediate rows), o and down by input columns, embedding and
// lm_head by vocabulary rows, norms and MoE routers replicated. tp must divide the query heads and the intermediate
// size, and divide the KV heads or be a multiple of them (then each KV head is replicated on tp / num_kv_heads
// ranks). pp splits the layers as evenly as possible, earlier stages taking the extra; the first stage holds the
// embedding, the last the final norm and lm_head (its own copy of a tied embedding when pp > 1).
// CAF-free; core/ only: the caller turns a model's config.json into a ModelShape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "core/topology_config.hpp"

namespace actord {

// What the plan needs of a model (from plugins/model_config.hpp's ModelConfig and the dtypes the engine resolves).
struct ModelShape {
  int num_layers = 0;
  int num_heads = 0;           // query heads
  int num_kv_heads = 0;
  int head_dim = 0;
  int hidden_size = 0;
  int intermediate_size = 0;   // of the dense MLP (and of each expert unless moe_intermediate_size is set)
  int moe_intermediate_size = 0;  // of each expert when it differs (Qwen3-MoE); 0: intermediate_size
  int shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert in every sparse layer; 0: none
  int vocab_size = 0;
  int num_experts = 0;         // 0: dense MLP
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases
  // Bytes per weight as workers hold them: the element size, or a fraction for quantized weights (codes and scales).
  double weight_bytes_per_param = 4;
  uint64_t kv_bytes_per_token = 0;      // K and V of every layer and KV head, in the KV cache's dtype
};

struct Range {
  int first = 0;
  int count = 0;  // [first, first + count)
};

// What one rank of a tp x pp replica holds of a model: the rules of the header comment.
struct RankShard {
  Range layers;      // this pipeline stage's layers
  Range heads;       // query heads of each of its layers
  Range kv_heads;    // KV heads it holds (one, replicated, when tp exceeds num_kv_heads)
  Range vocab;       // vocabulary rows of the embedding (first stage) and lm_head (last stage); none in between
  Range intermediate;  // rows of the dense MLP's intermediate features
  Range expert_intermediate;  // rows of each expert's intermediate features (== intermediate unless they differ)
  Range shared_intermediate;  // rows of the shared expert's intermediate features (Qwen2-MoE); empty otherwise
  Range experts;     // the experts of each MoE layer it holds: all of them, or (ep > 1) its EP rank's share, whole
  bool embedding = false;  // first stage
  bool lm_head = false;    // last stage
};

// The shard of rank (tp_rank, pp_rank) in a replica of tp x pp ranks. Needs only the model's layers, heads, KV
// heads, intermediate size, experts and vocabulary; the caller has checked tp, pp and ep against them
// (plan_topology does). ep: 1 (each expert split by TP as a dense MLP), tp (whole experts, num_experts / tp of
// them per tp rank, in order), or a multiple of tp (pp 1): `lane` is the rank's attention data parallel lane, its
// EP rank lane * tp + tp_rank holds num_experts / ep whole experts; attention, dense layers and vocabulary are
// sharded over the lane's tp ranks as without lanes.
RankShard shard_of_rank(const ModelShape& model, int tp, int pp, int tp_rank, int pp_rank, int ep = 1, int lane = 0);

// AFD: why an FFN pool of `ffn_workers` does not fit the model (starting with the key it is about, relative to
// the group: "afd.ffn.workers must divide ..."), or empty when it does.
std::string ffn_pool_problem(const ModelShape& model, int ffn_workers);

// Why tp x pp (x ep) does not fit the model (the rule, without a key path, starting with the key it is about:
// "tp must divide num_attention_heads (8), got 3"), or empty when it does.
std::string parallelism_problem(const ModelShape& model, int tp, int pp, int ep = 1);

struct RankPlan {
  // "GROUP/replica/R/worker/tpT.ppP", e.g. "main/replica/0/worker/tp1.pp0"; an FFN worker (AFD)
  // "GROUP/replica/R/ffn/F"
  std::string name;
  int replica = 0;
  int ffn_rank = -1; // AFD: its index in the replica's FFN pool; -1: a rank running attention (every rank without AFD)
  int lane = 0;      // attention data parallel lane (ep beyond tp), else 0
  int tp_rank = 0;
  int pp_rank = 0;
  Placement placement = Placement::thread;  // thread: inside the engine's process; process, node: its own process
  std::string node = kLocalNode;            // "local" or a nodes[] name
  int threads = 0;   // CPU threads, resolved on this machine; 0 for ranks on other nodes (their agent resolves it)
  Range layers;      // this pipeline stage's layers
  Range heads;       // query heads of each of its layers
  Range kv_heads;    // KV heads it holds (one, replicated, when tp exceeds num_kv_heads)
  Range vocab;       // vocabulary rows of the embedding (first stage) and lm_head (last stage); none in between
  Range experts;     // the experts of each MoE layer it holds (whole ones with ep > 1; empty for a dense model)
  Range ffn_intermediate;  // AFD: the dense MLPs' intermediate features an FFN worker holds (none on attention ranks)
  int redundant_experts = 0;  // and slots for that many copies more (EPLB)
  bool embedding = false;  // first stage
  bool lm_head = false;    // last stage
  uint64_t weight_params = 0;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes_per_token = 0;  // its layers and KV heads
  uint64_t kv_pool_bytes = 0;       // its share of the replica's KV blocks
  uint64_t swap_bytes = 0;          // host swap space (preemption_mode swap)
  uint64_t memory_bytes() const { return weight_bytes + kv_pool_bytes + swap_bytes; }
};

struct GroupPlan {
  std::string name;
  int replicas = 1;
  int tp = 1;
  int pp = 1;
  int ep = 1;
  int lanes = 1;                // attention data parallel lanes of each replica (ep / tp when ep exceeds tp, AFD's)
  int ffn_workers = 0;          // AFD: each replica's FFN pool (its ranks follow its lanes' in `ranks`)
  int kv_replication = 1;       // ranks holding each KV head: tp / num_kv_heads when tp exceeds it, else 1
  uint32_t num_kv_blocks = 0;   // of each replica lane: every rank of it holds this many blocks of its own layers/heads
  uint32_t num_swap_blocks = 0;
  std::vector<RankPlan> ranks;  // replica-major, then lane, then pipeline stage, then tp rank; then its FFN workers
};

struct NodePlan {
  std::string name;     // "local" first, then nodes[] in order (listed ones without ranks too)
  std::string address;  // empty for local
  int ranks = 0;
  int processes = 0;    // worker processes; ranks placed as threads run inside the engine's process
  int threads = 0;      // threads computing at once (local only): a replica's stages here take turns, counted once
  uint64_t weight_bytes = 0;
  uint64_t kv_pool_bytes = 0;
  uint64_t swap_bytes = 0;
};

struct TopologyPlan {
  unsigned local_cores = 0;
  int local_threads = 0;         // the local ranks' threads computing at once (NodePlan::threads of local)
  bool oversubscribed = false;   // more than local_cores: allowed by the groups' `oversubscribe`
  uint64_t model_weight_bytes = 0;  // the whole model, unsharded
  std::vector<GroupPlan> groups;
  std::vector<NodePlan> nodes;
};

// The ranks placed on this machine ask for more threads at once than it has cores (a rank with threads 0 counts
// one; the pipeline stages of a replica take turns, so they count as one), and a group with ranks here does not set
// `oversubscribe`: an error naming that group's threads key and both numbers.
Status check_threads_fit(const TopologyConfig& topology, unsigned local_cores);

// The node each rank of `group` runs on (kLocalNode or a nodes[] name), replica-major, a replica's ranks in the
// order of GroupPlan::ranks (lanes, then stage, then tp rank; then AFD's FFN workers): how `placement` spreads the
// group's replicas x pp x lanes over its nodes, evenly and in order. Every rank is kLocalNode unless placed on nodes.
std::vector<std::string> rank_nodes(const GroupSection& group);
// The same ranks' node agents: each node's nodes[].address in `topology`, "" for this machine.
std::vector<std::string> rank_agents(const TopologyConfig& topology, const GroupSection& group);

// The plan of `topology` for `model` on a machine of `local_cores` cores: check_threads_fit, the model's rules per
// group (tp against heads, KV heads, intermediate size and vocabulary; pp against the layers), and the KV pool of
// engine.kv_cache_memory per rank (core/kv_sizing, as for one worker: a replica's blocks are what its largest rank fits).
Result<TopologyPlan> plan_topology(const TopologyConfig& topology, const ModelShape& model, unsigned local_cores);

}  // namespace actord
