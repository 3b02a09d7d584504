// Writes safetensors files for tests: named tensors of F32, F16, BF16 or I32 values (any element type of that size).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace actord::test {

struct StoredTensor {
  std::string dtype;  // F32, F16, BF16, I32
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

template <class T>
StoredTensor stored(const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  StoredTensor t{dtype, std::move(shape), std::vector<unsigned char>(values.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

inline void write_safetensors(const std::filesystem::path& file, const std::map<std::string, StoredTensor>& tensors) {
  std::string header = "{";
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  while (header.size() % 8 != 0) header += " ";
  std::ofstream out(file, std::ios::binary);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), sizeof(length));
  out.write(header.data(), std::streamsize(header.size()));
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  }
}

}  // namespace actord::test
