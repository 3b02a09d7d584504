// Pre-tokenizers of HF tokenizer.json (internal header).
//
// Contract: `PreTokenizer::from_json` accepts null, Metaspace (replacement, prepend_scheme first/always/never or
// the legacy add_prefix_space, split) and Sequence of those; any other type gives Errc::unsupported naming it.
// `split` turns one normalized piece into the words the model tokenizes, with the HF semantics: Metaspace
// replaces ' ' by the replacement, prepends it (scheme "first": only for the piece that starts at offset 0 of the
// original input) unless the piece already starts with it, then splits before every replacement character.
// Immutable after construction.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"

namespace actord::tok {

class PreTokenizer {
 public:
  static Result<PreTokenizer> from_json(const nlohmann::json& j, const std::string& where);

  // Appends the words of `piece` to `out` (empty words dropped). `at_origin`: the piece starts at byte 0 of the
  // original text.
  void split(const std::string& piece, bool at_origin, std::vector<std::string>& out) const;

 private:
  enum class Prepend { always, first, never };
  struct Metaspace {
    std::string replacement = "\xE2\x96\x81";  // U+2581
    Prepend prepend = Prepend::always;
    bool split = true;
  };
  static Status parse_into(const nlohmann::json& j, const std::string& where, std::vector<Metaspace>& steps);

  std::vector<Metaspace> steps_;  // Sequence flattened
};

}  // namespace actord::tok
