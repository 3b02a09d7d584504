// Pre-tokenizers of HF tokenizer.json (internal header).
//
// Contract: `PreTokenizer::from_json` accepts null, Metaspace (replacement, prepend_scheme first/always/never or
// the legacy add_prefix_space, split), ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern;
// trim_offsets is irrelevant without offsets), Split (String or Regex pattern, behavior Isolated / Removed /
// MergedWithPrevious / MergedWithNext / Contiguous, invert), Digits (individual_digits) and Sequence of those;
// any other type gives Errc::unsupported naming it, and a bad regex gives Errc::parse_error.
// `split` turns one normalized piece into the words the model tokenizes, with the HF semantics (each step runs
// over every word the previous steps produced; empty words are dropped):
// - Metaspace replaces ' ' by the replacement, prepends it (scheme "first": only for the piece that starts at
//   offset 0 of the original input) unless the piece already starts with it, then splits before every
//   replacement character.
// - ByteLevel prepends ' ' when add_prefix_space and the word does not start with ' ', splits with the GPT-2
//   regex (Isolated) when use_regex, then maps every byte to its GPT-2 stand-in character (byte_level.hpp).
// - Split finds the regex matches (PCRE2, Unicode mode) and splits like tokenizers' NormalizedString::split.
// - Digits isolates Unicode numeric characters (Rust char::is_numeric), each alone when individual_digits,
//   else runs of them.
// Regex matching needs valid UTF-8: Tokenizer::encode repairs invalid input first (see `needs_valid_utf8`).
// Immutable after construction; safe to share between threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"
#include "tokenizer/regex.hpp"

namespace actord::tok {

class PreTokenizer {
 public:
  static Result<PreTokenizer> from_json(const nlohmann::json& j, const std::string& where);

  // Appends the words of `piece` to `out` (empty words dropped). `at_origin`: the piece starts at byte 0 of the
  // original text.
  void split(const std::string& piece, bool at_origin, std::vector<std::string>& out) const;

  // True when some step matches regexes or classifies Unicode characters (input must be valid UTF-8).
  bool needs_valid_utf8() const;
  // True when the chain contains a ByteLevel step.
  bool has_byte_level() const;

  enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

 private:
  enum class Prepend { always, first, never };
  enum class Kind { metaspace, byte_level, split, digits };
  struct Step {
    Kind kind = Kind::metaspace;
    // Metaspace
    std::string replacement = "\xE2\x96\x81";  // U+2581
    Prepend prepend = Prepend::always;
    bool split = true;
    // ByteLevel
    bool add_prefix_space = false;
    bool use_regex = true;
    // Split (also ByteLevel's regex)
    Regex regex;
    Behavior behavior = Behavior::isolated;
    bool invert = false;
    // Digits
    bool individual_digits = false;
  };
  using Word = std::pair<std::string, bool>;  // text, starts at offset 0 of the original input
  static Status parse_into(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps);
  static void apply(const Step& st, Word& w, std::vector<Word>& next);

  std::vector<Step> steps_;  // Sequence flattened
};

}  // namespace actord::tok
