// tokenizer.json loading, encoding and decoding (tokenizer/: Tokenizer, IncrementalDetokenizer, TextStream).
// Input: tokenizer.json, then NUL, tokenizer_config.json (empty: none), then NUL, a text to encode, then
// NUL-separated stop strings.
// Properties: load never throws or crashes (errors name the file); encode gives ids inside the vocabulary; decode
// and the streaming detokenizer take any ids, out-of-range ones included; the streamed text equals decode() of the
// same ids (IncrementalDetokenizer's contract); the text a TextStream emits is a prefix of the whole text and holds
// no stop string.
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/text_stream.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ScratchDir dir;
  auto parts = fuzz::split_nul(data, size, 8);
  parts.resize(std::max<size_t>(parts.size(), 3));
  dir.put("tokenizer.json", parts[0]);
  dir.put("tokenizer_config.json", parts[1], !parts[1].empty());
  auto tok = Tokenizer::load(dir.path());
  if (!tok) {
    fuzz::require(!tok.error().message.empty(), "an empty error message");
    return 0;
  }
  const int32_t vocab = tok->vocab_size();
  const std::string& text = parts[2];
  for (bool special : {true, false}) {
    for (int32_t id : tok->encode(text, special))
      fuzz::require(id >= 0 && id < vocab, "encode gave id " + std::to_string(id) + " of vocab " + std::to_string(vocab));
  }
  // Ids to decode: the text's own, then some from its bytes (a few beyond the vocabulary).
  std::vector<int32_t> ids = tok->encode(text, true);
  for (size_t i = 0; i + 1 < text.size() && ids.size() < 256; i += 2) {
    const int32_t raw = static_cast<uint8_t>(text[i]) << 8 | static_cast<uint8_t>(text[i + 1]);
    ids.push_back(raw % (vocab + 4) - (raw % 97 == 0 ? vocab + 8 : 0));
  }
  for (bool skip : {true, false}) {
    const std::string whole = tok->decode(ids, skip);
    IncrementalDetokenizer detok(*tok, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.push({id});
    streamed += detok.finish();
    fuzz::require(streamed == whole, "streamed text differs from decode(): '" + streamed + "' vs '" + whole + "'");
  }
  for (size_t i = 0; i < ids.size(); i += 7) {
    (void)tok->id_to_token(ids[i]);
    (void)tok->is_special(ids[i]);
    (void)tok->is_byte_token(ids[i]);
  }
  std::vector<std::string> stops;
  for (size_t i = 3; i < parts.size(); ++i)
    if (!parts[i].empty()) stops.push_back(parts[i]);
  TextStream stream(*tok, stops);
  const std::string whole = tok->decode(ids, true);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += stream.push({ids[i]}, i + 1 == ids.size());
  fuzz::require(whole.compare(0, out.size(), out) == 0, "TextStream emitted text that is not a prefix");
  for (const auto& s : stops) fuzz::require(out.find(s) == std::string::npos, "TextStream emitted a stop string");
  return 0;
}
