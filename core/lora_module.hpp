// A LoRA adapter the topology declares (lora.modules): the name requests use, and its folder
// (plugins/lora_adapter.hpp reads it).
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>

namespace actord {

struct LoraModule {
  std::string name;
  std::filesystem::path path;
  bool operator==(const LoraModule&) const = default;
};

// An adapter's name: letters, digits and _ . - / : (requests name it as their model).
inline bool is_lora_name(const std::string& name) {
  return !name.empty() && std::ranges::all_of(name, [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '/' || c == ':';
  });
}

}  // namespace actord
