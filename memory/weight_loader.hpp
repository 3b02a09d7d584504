// Finds model weights by HF tensor name across `model.safetensors` or the shards listed in
// `model.safetensors.index.json`, memory-mapped.
//
// Contract: open() fails with an Error naming the folder when neither file exists, or naming the shard when the
// index points at a missing or broken one. load_f32() fails naming the tensor when it is missing or its shape
// differs from the expected one ("expected [64, 512], found [64, 511]").
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/safetensors.hpp"

namespace actord {

class WeightLoader {
 public:
  static Result<WeightLoader> open(const std::filesystem::path& model_dir);

  bool contains(const std::string& name) const;
  // The tensor in its stored dtype, memory-mapped; valid while the loader lives. A float tensor (an I32 one is an
  // error naming it), or with `int32` an I32 one (AWQ / GPTQ packed codes).
  Result<const TensorView*> view(const std::string& name, const std::vector<int64_t>& expected_shape,
                                 bool int32 = false) const;
  const TensorView* find(const std::string& name) const;  // any tensor by name, unchecked; null when missing
  std::optional<DType> first_dtype() const;  // dtype of the first tensor, for "auto"
  Result<std::vector<float>> load_f32(const std::string& name, const std::vector<int64_t>& expected_shape) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;  // tensor name -> view inside one of files_
};

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace actord
