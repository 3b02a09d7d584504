// How a model plugin declares its weights: HF tensor name, shape, and how the tensor is split across the ranks of
// a tensor-parallel (TP) or expert-parallel (EP) group. The loader reads exactly these; the topology code shards
// by them without knowing the model family.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actord {

enum class ShardKind {
  replicated,  // every rank holds the whole tensor (norms, router gates)
  column,      // split along the output features (rows of an HF Linear weight): q/k/v, gate/up, biases of those
  row,         // split along the input features (columns of an HF Linear weight): o_proj, down_proj
  vocab,       // split along the vocabulary (embedding rows, lm_head rows)
  expert,      // one MoE expert's weight: owned whole by the EP rank that owns the expert
};

const char* shard_kind_name(ShardKind kind);

struct WeightSpec {
  std::string name;             // HF tensor name, e.g. model.layers.3.self_attn.q_proj.weight
  std::vector<int64_t> shape;   // full (unsharded) shape
  ShardKind shard = ShardKind::replicated;
  int layer = -1;               // -1: not in a layer
  int expert = -1;              // with ShardKind::expert: which expert
};

}  // namespace actord
