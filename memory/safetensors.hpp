// Memory-mapped reader for one safetensors file (https://huggingface.co/docs/safetensors).
//
// Contract: open() validates the whole header (JSON, dtypes, offsets inside the file) and never aborts on bad
// input: a truncated file, a malformed header or a tensor past the end of the data come back as an Error naming
// the file and the tensor. Views stay valid as long as the SafetensorsFile lives. Thread-safe for readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/status.hpp"

namespace actord {


struct TensorView {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // [prod(shape)] elements of dtype, little endian
  size_t num_elements() const;
};

// Drops the memory-mapped pages that lie wholly inside `view` from this process's resident memory (madvise
// MADV_DONTNEED): for a tensor copied elsewhere at load time. The view stays valid; reading it again faults the pages
// back in from the file.
void release_pages(const TensorView& view);

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::filesystem::path& path);
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// Converts all elements of `src` (any supported dtype) to f32.
inline void convert_to_f32(const TensorView& src, float* dst) {
  convert_to_f32(src.dtype, src.data, dst, src.num_elements());
}

}  // namespace actord
