// A GGUF file (llama.cpp's model format, versions 2 and 3), mapped read-only: its metadata (typed key/value pairs:
// the model's shape under "<arch>.*", its tokenizer under "tokenizer.ggml.*") and its tensor index (name, shape,
// ggml type, bytes in the mapping).
//
// Contract: open() reads and checks the whole header — every length and offset against the file's size, every
// tensor's bytes from its type and shape, the data section's alignment — and returns an error naming the file and
// what is wrong (never reads outside the mapping, never aborts on a malformed file). Tensor shapes are as GGUF
// writes them, fastest dimension first: a matrix of `rows` x `cols` has dims {cols, rows}. The mapping lives as long
// as the GgufFile (copies share it). CAF-free; const methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"

namespace actord {

// The ggml tensor types this reader knows the size of (others are refused at open, naming their number).
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9, q2_k = 10, q3_k = 11, q4_k = 12,
  q5_k = 13, q6_k = 14, q8_k = 15, bf16 = 30,
};
const char* ggml_type_name(GgmlType type);  // "F32", "Q4_K", ...
// Elements per block and bytes per block of a type; nullopt for a type this reader does not know.
struct GgmlBlock {
  int64_t elements = 0;
  int64_t bytes = 0;
};
std::optional<GgmlBlock> ggml_block(uint32_t type);

struct GgufValue {
  enum class Kind { integer, floating, boolean, string, array };
  Kind kind = Kind::integer;
  int64_t integer = 0;        // every integer type (u64 values above INT64_MAX are refused at open)
  double floating = 0;
  bool boolean = false;
  std::string string;
  // An array: its elements' kind (integer, floating, boolean: `numbers`; string: `strings`; nested arrays are
  // refused).
  Kind element = Kind::integer;
  std::vector<double> numbers;
  std::vector<std::string> strings;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // fastest first
  GgmlType type = GgmlType::f32;
  const unsigned char* data = nullptr;
  size_t bytes = 0;
  int64_t elements() const;
  int64_t rows() const;  // product of dims[1..]; 1 for a vector
  int64_t cols() const { return dims.empty() ? 0 : dims[0]; }
};

class GgufFile {
 public:
  static Result<GgufFile> open(const std::filesystem::path& path);
  // The same checks on a file image in memory (a copy is kept; `where` names it in errors): tests, the fuzzer.
  static Result<GgufFile> from_bytes(std::vector<unsigned char> bytes, const std::string& where);
  // Whether `path` is a regular file that starts with the GGUF magic.
  static bool is_gguf(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  // Typed reads; an error names the file and the key (missing, or of another kind / out of range).
  Result<std::string> string(std::string_view key) const;
  Result<int64_t> integer(std::string_view key) const;
  Result<double> number(std::string_view key) const;  // an integer or a float
  std::optional<int64_t> integer_or(std::string_view key) const;  // nullopt when absent or not an integer
  std::optional<double> number_or(std::string_view key) const;
  std::optional<bool> boolean_or(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;
  // Gives the pages of a tensor's bytes back to the kernel (they are read again from the file if touched later).
  void release(const GgufTensor& t) const;

 private:
  std::filesystem::path path_;
  uint32_t version_ = 0;
  std::shared_ptr<void> mapping_;
  size_t size_ = 0;
  bool mapped_ = false;  // open(): a file mapping, whose pages release() may drop
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;

  static Result<GgufFile> parse(std::shared_ptr<void> owner, const unsigned char* data, size_t size,
                                const std::filesystem::path& path);
};

}  // namespace actord
