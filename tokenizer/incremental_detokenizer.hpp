// actord::IncrementalDetokenizer: streaming decode of one generated sequence.
//
// Contract:
// - push(ids) appends ids and returns the text that became final; finish() returns whatever was held back.
//   The concatenation of every push() result plus finish() equals tok.decode(all ids, skip_special_tokens) less
//   the decode of the context the detokenizer started after (the prompt's last tokens): so the first token's text is
//   what it adds after the prompt, its leading space kept where a SentencePiece decoder strips it at a text's start
//   (" there" after "Once upon a time,", as vLLM and llama.cpp's server give it). Without a context, or when the
//   context ends inside a character, or in a byte run the first id continues, it is the ids' own decode.
// - A result never ends inside a UTF-8 character and never ends with U+FFFD that more tokens could still turn
//   into a real character. Text is held back while the last token is a `<0xXX>` byte-fallback token (the
//   ByteFallback decoder treats a run of byte tokens as one unit, so the run must be complete before any of it
//   is final) or while the decoded window ends with U+FFFD; finish() emits it (invalid bytes as U+FFFD).
// - Works on a window of previous tokens (prefix offset / read offset, as vLLM and HF text-generation-inference
//   do): decode(ids[prefix:]) minus decode(ids[prefix:read]) is the new text, so decoder rules that depend on
//   the first token (SentencePiece leading-space stripping) are applied the same way on both sides. A window never
//   starts at ids that decode to nothing by themselves (a lone space a Strip decoder removes), so such a rule never
//   reaches past the window's first token.
// - finish() ends the sequence; push() after finish() is not supported.
// - Keeps a pointer to `tok`: the Tokenizer must outlive the detokenizer. Not thread-safe (one per sequence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace actord {

class IncrementalDetokenizer {
 public:
  // Context ids read from the end of `context`, at most: the window's tokens and a byte run before them up to the
  // longest the window reaches back for (a longer run ending there leaves the context out).
  static constexpr std::size_t kContextTokens = 6;
  static constexpr std::size_t kLongestByteRun = 256;
  static constexpr std::size_t kContextReach = kContextTokens + kLongestByteRun;

  IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = true,
                         std::span<const int32_t> context = {});

  std::string push(const std::vector<int32_t>& ids);
  std::string finish();

 private:
  std::string window_text(std::size_t begin, std::size_t end) const;
  bool kept(int32_t id) const;                   // an id decode() would not drop
  void append(const std::vector<int32_t>& ids);  // the kept ones of `ids`

  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // every pushed id except skipped special tokens
  std::size_t prefix_offset_ = 0;
  std::size_t read_offset_ = 0;
  bool context_in_byte_run_ = false;  // the context ends with a byte token and no id was appended after it
  std::optional<std::string> prefix_text_;  // decode of ids [prefix_offset_, read_offset_), once known
  std::size_t emitted_bytes_ = 0;  // size of decode(ids_) returned so far (the context's text counted as returned)
};

}  // namespace actord
