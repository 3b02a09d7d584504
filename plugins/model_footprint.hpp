// How much memory a model's weights take in a worker, estimated from its config.json before anything is loaded.
//
// Contract: pure arithmetic on the shape (embedding, lm_head unless tied, per layer q/k/v/o with biases, the MLP
// or every expert with its router, the norms) times the element size of the dtype the weights are kept in. An
// estimate for the decoder-only families of plugins/transformer (out-of-tree plugins of another shape may differ);
// it feeds memory/memory_budget's check before the worker allocates. Saturates at UINT64_MAX, never wraps.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "plugins/model_config.hpp"

namespace actord {

uint64_t estimated_num_parameters(const ModelConfig& model);
uint64_t estimated_weight_bytes(const ModelConfig& model, DType weight_dtype);

}  // namespace actord
