// Model plugins keyed by the HF `architectures[0]` name.
//
// Contract: a registry is a plain value (no global singleton): an engine builds one with the built-in families and
// passes it to its workers. create() returns an Error for an unknown architecture, listing the known ones.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "plugins/model.hpp"
#include "plugins/weight_store.hpp"

namespace actord {

class ModelRegistry {
 public:
  using Factory = std::function<Result<std::unique_ptr<Model>>(const ModelConfig&, const ModelLoadOptions&)>;

  static ModelRegistry with_builtins();

  void add(std::string architecture, Factory factory);
  bool contains(const std::string& architecture) const;
  std::string known_architectures() const;  // comma-separated, for error messages
  Result<std::unique_ptr<Model>> create(const ModelConfig& config, const ModelLoadOptions& options) const;

 private:
  std::map<std::string, Factory> factories_;
};

}  // namespace actord
