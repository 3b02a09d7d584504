// The safetensors header (memory/safetensors: parse_safetensors, what SafetensorsFile::open runs on the mapped
// file). Input: a whole safetensors file (8-byte little-endian header length, JSON header, data).
// Properties: it never crashes; every tensor it accepts lies inside the data, its shape's byte size is the span of
// its data_offsets, and converting it to f32 reads only those bytes (ASan checks the reads).
#include <vector>

#include "fuzz_util.hpp"
#include "memory/safetensors.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that ASan sees any read past the file's end.
  std::vector<std::byte> file(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  auto tensors = parse_safetensors(file.data(), file.size(), "fuzz.safetensors");
  if (!tensors) {
    fuzz::require(tensors.error().message.rfind("fuzz.safetensors: ", 0) == 0, "error without the file's name");
    return 0;
  }
  const std::byte* end = file.data() + file.size();
  std::vector<float> f32;
  for (const auto& [name, view] : *tensors) {
    const size_t bytes = view.num_elements() * dtype_size(view.dtype);
    fuzz::require(view.data >= file.data() + 8 && bytes <= static_cast<size_t>(end - view.data),
                  "tensor '" + name + "' lies outside the file");
    for (int64_t d : view.shape) fuzz::require(d >= 0, "negative dimension accepted");
    f32.resize(view.num_elements());
    convert_to_f32(view, f32.data());
  }
  return 0;
}
