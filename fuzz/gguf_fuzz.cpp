// GGUF files (core/gguf: GgufFile::from_bytes, what GgufFile::open runs on the mapped file), their tensors' decoding
// (memory/gguf_tensors) and the tokenizer documents of their metadata (tokenizer/gguf_vocab). Input: a whole file.
// Properties: it never crashes; errors name the file; every tensor it accepts lies inside the file and decodes
// reading only its bytes (ASan checks the reads); a tokenizer built from accepted metadata encodes a string.
#include <vector>

#include "core/gguf.hpp"
#include "fuzz_util.hpp"
#include "memory/gguf_tensors.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::from_bytes(std::vector<unsigned char>(data, data + size), "fuzz.gguf");
  if (!file) {
    fuzz::require(file.error().message.rfind("fuzz.gguf: ", 0) == 0, "error without the file's name");
    return 0;
  }
  for (const GgufTensor& t : file->tensors()) {
    fuzz::require(t.bytes <= size, "tensor '" + t.name + "' larger than the file");
    if (t.elements() > (1 << 20)) continue;  // decoding cost, not a property
    auto values = gguf_values_f32(t);
    if (values) fuzz::require(values->size() == static_cast<size_t>(t.elements()), "decoded the wrong count");
  }
  (void)tokenizer_documents_from_gguf(*file);
  return 0;
}
