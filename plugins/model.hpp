// The interface every model plugin implements, and the batch it runs.
//
// Contract: a Model is created once per worker rank (it owns its shard of the weights: ModelLoadOptions::place says
// which) and called from one thread at a time (the worker's). forward() runs the tokens of one step for several
// sequences at once, writes their K/V into the paged cache, and returns logits only for the rows the caller asks
// for. Every rank of a tensor/pipeline-parallel replica runs forward() on the same batch at the same time; the ranks
// exchange what they must through the communicators of the ForwardContext. With attention data parallel lanes
// (RankPlace::lanes() > 1) each lane runs its own batch, and every rank of the replica calls forward() for every step
// at the same time, a lane without sequences with an empty batch: it still serves its experts to the other lanes.
// CAF-free.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.hpp"
#include "core/step_trace.hpp"
#include "executors/backend.hpp"
#include "executors/forward_batch.hpp"
#include "plugins/model_config.hpp"

namespace actord {

class KvCache;
namespace coll {
class Communicator;
}

// What a forward pass runs on: the rank's executor backend (its device and kernels: executors/backend.hpp) and its
// links to the other ranks of its replica.
struct ForwardContext {
  ForwardContext(exec::Backend& rank_backend) : backend(rank_backend) {}  // NOLINT: a lone rank is just its backend
  exec::Backend& backend;
  coll::Communicator* tp = nullptr;        // the ranks of this pipeline stage (rank = tp rank); null when tp is 1
  coll::Communicator* pipeline = nullptr;  // this tp rank of every stage (rank = stage); null when pp is 1
  // Every EP rank of the replica (rank = RankPlace::ep_rank()) when it has attention data parallel lanes; null
  // otherwise (the experts travel over the TP communicator).
  coll::Communicator* ep = nullptr;
  // With attention data parallel lanes: the most tokens any lane of the replica runs in this step (the scheduler
  // knows them all), so that every rank joins as many expert exchanges as the busiest lane makes.
  int lane_tokens = 0;
  uint64_t* comm_ns = nullptr;             // when set, the model adds the time it spends in collectives
  // When set (--trace), the model records its phases there (TraceScope: embed, attention and mlp or experts per
  // layer, logits), StepTrace::layer naming the layer; the communicators record their operations themselves.
  StepTrace* trace = nullptr;
  // When set (by the worker, when every row of the step is greedy: its token is the argmax of its logits), a model
  // may leave `logits` empty and write here instead each logit row's best over the vocabulary ids it holds
  // (Backend::row_bests: whole rows on a lone rank, its vocabulary shard under TP, no gather); the worker exchanges
  // these 8 bytes a row across the TP group and merges them (sampler.hpp's merge_row_bests). A model that ignores it
  // returns logits as always (the worker tells which from what it got). Every rank of a stage must do the same.
  std::vector<RowBest>* row_bests = nullptr;
  // When set (by the sampling rank, for a step whose sampled rows neither fork nor ask prompt logprobs, and without
  // row_bests): the sampling requests of the logit rows, in row order. A model whose rows are computed in one piece
  // may have its backend sample the whole rows where they are (Backend::sample_rows: after a TP gather, no logits
  // downloaded), write the tokens to *samples and leave `logits` empty; otherwise it returns logits as always.
  struct Sampling {
    std::span<const SampleRequest> requests;
    std::vector<SampledToken>* samples = nullptr;
  };
  const Sampling* sampling = nullptr;
};

// The KV cache a rank's model writes: its stage's layers and its KV heads, and where they are in the whole model's
// (total_* 0: the whole model's are num_layers and num_kv_heads).
struct KvShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int first_layer = 0, first_kv_head = 0;
  int total_layers = 0, total_kv_heads = 0;
};

// Mixture-of-experts models: the tokens the last forward() routed to each expert of this rank's stage's layers,
// tokens[(layer - first_layer) * num_experts + expert] (dense layers count none). Empty for dense models.
struct ExpertLoad {
  int first_layer = 0;
  int num_experts = 0;
  std::span<const uint32_t> tokens;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // The whole model's unless the model was loaded as a shard.
  virtual KvShape kv_shape() const { return {config().num_layers, config().num_kv_heads, config().head_dim}; }
  // logits: [rows, vocab_size] (or none, see ForwardContext::row_bests): per slice in the order of batch.seqs, the
  // rows of its last logit_rows tokens, in order; on every rank of the last pipeline stage, and empty on the others.
  // The context's backend runs it. An Error when a communicator failed (a peer rank died or timed out: the replica
  // is broken), or when the context's backend is not the one the model was loaded into.
  virtual Status forward(const ForwardBatch& batch, KvCache& kv, std::vector<float>& logits,
                         const ForwardContext& context) = 0;
  virtual ExpertLoad expert_load() const { return {}; }
  // The LoRA adapters it serves (ModelLoadOptions::lora, SeqSlice::lora 1 .. this); a model that does not take
  // adapters says 0, and the worker refuses adapters it was given.
  virtual int num_lora_adapters() const { return 0; }
  // Two-batch overlap: a model sharing this one's weights (and its expert placement as it is now) with scratch and
  // counters of its own, so that two micro-batches can run forward() on two threads that take turns, never at
  // once. Null when the model cannot (the worker then runs each step as one batch).
  virtual std::unique_ptr<Model> twin() const { return nullptr; }
  // Expert parallelism with EPLB: the placement of every layer's experts from the next forward() on
  // ([layer][slot], core/expert_placement.hpp, for all the model's layers). Every EP rank of the replica calls it
  // at the same point with the same placement (a collective over the context's EP communicator, or its TP one
  // without lanes): the experts a rank's slots gain come from ranks that hold them. A malformed placement is
  // refused on every rank alike, before anything moves, and leaves the old one whole. Models without EP refuse it.
  virtual Status set_expert_placement(std::span<const int32_t> placement, const ForwardContext& context) {
    (void)placement;
    (void)context;
    return make_error(Errc::unsupported, "this model has no expert parallel placement");
  }
};

}  // namespace actord
