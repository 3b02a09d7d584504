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
  bool int32 = false;  // an I32 tensor (the packed codes of an AWQ / GPTQ checkpoint): dtype is then f32's size only
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // [prod(shape)] elements of dtype, little endian
  size_t num_elements() const;
};

// Drops the memory-mapped pages that lie wholly inside `view` from this process's resident memory (madvise
// MADV_DONTNEED): for a tensor copied elsewhere at load time. The view stays valid; reading it again faults the pages
// back in from the file.
void release_pages(const TensorView& view);

// Validates a whole safetensors file image held in memory (`bytes`, `size` bytes: the 8-byte header length, the JSON
// header, the data) and returns its tensors, whose views point into `bytes`. Rules: the header is a JSON object;
// each entry but __metadata__ is an object with a supported dtype, a shape of integers in [0, 2^63) whose product
// times the element size does not overflow, and data_offsets [begin, end] of integers with begin <= end <= the
// data's size and end - begin the tensor's byte size. Errors name `where` and the tensor; nothing throws.
Result<std::map<std::string, TensorView>> parse_safetensors(const std::byte* bytes, size_t size,
                                                            const std::string& where);

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
