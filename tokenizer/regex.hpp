// PCRE2-backed regular expressions for tokenizer.json patterns (internal header).
//
// Contract: `Regex::compile` compiles a pattern with PCRE2_UTF | PCRE2_UCP (so \p{L}, \s, \w and (?i:...) are
// Unicode-aware, as with the Oniguruma engine HF tokenizers uses) and JIT-compiles it when PCRE2 supports JIT.
// Before compiling, \s (anywhere) and \S (outside character classes) are rewritten to explicit Unicode
// White_Space classes: PCRE2's UCP \s also matches U+180E, Oniguruma's does not (\S inside a class is kept).
// A bad pattern gives Errc::parse_error with PCRE2's message. `find_all` returns the non-overlapping matches
// (byte offsets) left to right; after an empty match the search resumes one character later. The subject must be
// valid UTF-8: PCRE2 checks it and `find_all` returns no match for invalid input (callers repair input first).
// A Regex is immutable after compile and shared by copies; matching is thread-safe (match data per call).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.hpp"

namespace actord::tok {

class Regex {
 public:
  static Result<Regex> compile(const std::string& pattern);
  // A pattern matching `literal` exactly (every character escaped).
  static Result<Regex> literal(const std::string& literal);

  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view subject) const;
  // Replaces every match by `content` (literally, no group references).
  std::string replace_all(std::string_view subject, std::string_view content) const;

  struct Code;

 private:
  std::shared_ptr<const Code> code_;
};

}  // namespace actord::tok
