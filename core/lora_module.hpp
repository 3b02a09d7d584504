// A LoRA adapter the topology declares (lora.modules): the name requests use, and its folder
// (plugins/lora_adapter.hpp reads it).
#pragma once

#include <filesystem>
#include <string>

namespace actord {

struct LoraModule {
  std::string name;
  std::filesystem::path path;
  bool operator==(const LoraModule&) const = default;
};

}  // namespace actord
