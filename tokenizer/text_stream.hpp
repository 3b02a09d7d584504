// The text of one generated sequence as its token ids arrive: incremental detokenization, then stop strings.
//
// Contract: push(ids, final) returns the text that is safe to emit now (never a partial UTF-8 character, never a
// tail that could still grow into a stop string); `final` (the sequence ended) flushes what was held back. Once a
// stop string has appeared, stopped() is true: that push returns the text before it, later ones nothing. One per
// sequence; the Tokenizer must outlive it. `context` (the prompt's ids) is what the text follows: the first token's
// text is what it adds after it (IncrementalDetokenizer).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/stop_strings.hpp"

namespace actord {

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
             std::span<const int32_t> context = {});

  std::string push(const std::vector<int32_t>& ids, bool final);
  bool stopped() const { return stops_.stopped(); }

 private:
  IncrementalDetokenizer detokenizer_;
  StopStringMatcher stops_;
};

}  // namespace actord
