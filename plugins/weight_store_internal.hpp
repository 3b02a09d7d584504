// What weight_store.cpp, weight_store_gguf.cpp and weight_store_checkpoint.cpp share; internal to plugins/.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.hpp"
#include "plugins/weight_store.hpp"

namespace actord::store_detail {

// "x.q_proj.weight" -> "x.q_proj." (the prefix of an AWQ / GPTQ layer's tensors); empty for other names.
std::string checkpoint_prefix(const std::string& name);
// The slice resolved against the full shape [rows, cols] (counts of -1 filled in), or an error naming the tensor.
Result<MatrixSlice> resolve(const std::string& name, int64_t rows, int64_t cols, MatrixSlice slice);
// `e` with the tensor's name in front.
Error named(const std::string& name, const Error& e);

}  // namespace actord::store_detail
