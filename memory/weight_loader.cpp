#include "memory/weight_loader.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace actord {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<WeightLoader> WeightLoader::open(const std::filesystem::path& model_dir) {
  WeightLoader loader;
  std::vector<std::filesystem::path> shards;
  const auto single = model_dir / "model.safetensors";
  const auto index_path = model_dir / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(index_path, ec)) {
    std::ifstream in(index_path);
    nlohmann::json j;
    try {
      in >> j;
      std::set<std::string> names;
      for (const auto& [tensor, file] : j.at("weight_map").items()) names.insert(file.get<std::string>());
      for (const auto& n : names) shards.push_back(model_dir / n);
    } catch (const std::exception& e) {
      return make_error(Errc::parse_error, index_path.string() + ": malformed index: " + e.what());
    }
  } else if (std::filesystem::exists(single, ec)) {
    shards.push_back(single);
  } else {
    return make_error(Errc::not_found, model_dir.string() + ": no model.safetensors or model.safetensors.index.json");
  }
  for (const auto& shard : shards) {
    if (!std::filesystem::exists(shard, ec)) {
      return make_error(Errc::not_found, index_path.string() + " points at missing shard " + shard.string());
    }
    auto file = SafetensorsFile::open(shard);
    if (!file) return file.error();
    loader.files_.push_back(std::make_unique<SafetensorsFile>(std::move(*file)));
    for (const auto& [name, view] : loader.files_.back()->tensors()) loader.index_[name] = &view;
  }
  return loader;
}

bool WeightLoader::contains(const std::string& name) const { return index_.count(name) > 0; }

const TensorView* WeightLoader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

Result<const TensorView*> WeightLoader::view(const std::string& name, const std::vector<int64_t>& expected_shape,
                                             bool int32) const {
  auto it = index_.find(name);
  if (it == index_.end()) return make_error(Errc::not_found, "missing tensor '" + name + "'");
  const TensorView& view = *it->second;
  if (view.int32 != int32) {
    return make_error(Errc::parse_error, "tensor '" + name + "' is " + (view.int32 ? "I32" : dtype_name(view.dtype)) +
                                             ", expected " + (int32 ? "I32 (packed codes)" : "a float tensor"));
  }
  if (view.shape != expected_shape) {
    return make_error(Errc::parse_error, "tensor '" + name + "' has the wrong shape: expected " +
                                             shape_to_string(expected_shape) + ", found " + shape_to_string(view.shape));
  }
  return &view;
}

std::optional<DType> WeightLoader::first_dtype() const {
  for (const auto& [name, view] : index_) {
    if (!view->int32) return view->dtype;
  }
  return std::nullopt;
}

Result<std::vector<float>> WeightLoader::load_f32(const std::string& name,
                                                  const std::vector<int64_t>& expected_shape) const {
  auto v = view(name, expected_shape);
  if (!v) return v.error();
  std::vector<float> out((*v)->num_elements());
  convert_to_f32(**v, out.data());
  return out;
}

}  // namespace actord
