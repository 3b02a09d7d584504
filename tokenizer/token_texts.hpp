// The text of each token of a sequence as an API's logprobs show it: what the token adds to the text before it, so
// that SentencePiece tokens keep the leading space a lone decode strips (" there", not "there"), the texts add up to
// the sequence's text and the offsets index it (OpenAI's tokens and text_offset, chat's token and bytes).
//
// Contract: texts come from an IncrementalDetokenizer over the ids that skips special tokens; a special token shows
// its own name (e.g. "</s>") and adds nothing to the offsets. Byte-fallback tokens show "" and the first token after
// their run the whole character (a run may go on), as the streamed text gives them. extend(ids, true) ends the sequence: text held back
// (a truncated character) goes to the last token. after() is the same text for a token that was not sampled (an
// alternative of top_logprobs) after the ids before it. One per sequence; the Tokenizer must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.hpp"

namespace actord {

class TokenTexts {
 public:
  // `context`: the ids the sequence follows (a prompt whose text is not shown), none when the shown text starts
  // with the first token.
  TokenTexts(const Tokenizer& tok, std::span<const int32_t> context);

  void extend(std::span<const int32_t> ids, bool last);
  size_t size() const { return texts_.size(); }
  const std::string& text(size_t i) const { return texts_[i]; }
  size_t offset(size_t i) const { return offsets_[i]; }  // where token i's text starts in the shown text

  // `before` need hold no more than its last IncrementalDetokenizer::kContextReach ids: nothing before is read.
  static std::string after(const Tokenizer& tok, std::span<const int32_t> before, int32_t id);

 private:
  const Tokenizer* tok_;
  IncrementalDetokenizer detokenizer_;
  std::vector<std::string> texts_;
  std::vector<size_t> offsets_;
  std::vector<bool> special_;  // per token: shown by name, its text not in the shown text
  size_t shown_bytes_ = 0;    // the shown text's length so far
  bool ended_ = false;
};

}  // namespace actord
