// Normalizers of HF tokenizer.json (internal header).
//
// Contract: `Normalizer::from_json` accepts null, Sequence, Prepend, Replace (String or Regex pattern, the regex
// run by PCRE2 in Unicode mode), Lowercase, Strip and NFC / NFD / NFKC / NFKD (utf8proc), with the HF
// `tokenizers` semantics (Prepend only prepends to a non-empty string; Replace replaces every non-overlapping
// match left to right). Any other type gives Errc::unsupported naming the type; a bad regex Errc::parse_error.
// Lowercase maps ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic only.
// A Normalizer is immutable after construction and safe to share between threads.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"
#include "tokenizer/regex.hpp"
#include "tokenizer/unicode.hpp"

namespace actord::tok {

class Normalizer {
 public:
  // `where` names the file for error messages (e.g. "tokenizer.json").
  static Result<Normalizer> from_json(const nlohmann::json& j, const std::string& where);

  std::string apply(std::string s) const;
  bool empty() const { return steps_.empty(); }
  // True when some step needs valid UTF-8 input (regex or Unicode normalization forms).
  bool needs_valid_utf8() const;

 private:
  enum class Kind { prepend, replace, replace_regex, lowercase, strip, unicode };
  struct Step {
    Kind kind = Kind::prepend;
    std::string a;  // prepend text / replace pattern
    std::string b;  // replace content
    bool left = false, right = false;
    Regex regex;                        // replace_regex
    NormalForm form = NormalForm::nfc;  // unicode
  };
  static Status parse_into(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps);

  std::vector<Step> steps_;  // a Sequence is flattened: applying steps in order is the same thing
};

// Replaces every non-overlapping occurrence of `from` in `s` by `to`, scanning left to right.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

// Simple lowercase mapping (see contract above).
std::string to_lower(std::string_view s);

}  // namespace actord::tok
