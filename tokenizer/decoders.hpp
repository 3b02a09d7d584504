// Decoders of HF tokenizer.json (internal header).
//
// Contract: `Decoder::from_json` accepts null, Sequence, Replace (String pattern), ByteFallback, Fuse,
// Strip (content, start, stop) and Metaspace, with tokenizers' decode_chain semantics; other types give
// Errc::unsupported naming the type. `decode` turns token strings into text: each step maps the token list,
// then the pieces are joined with "" (with no decoder at all, joined with " " as tokenizers does).
// ByteFallback gathers consecutive `<0xXX>` tokens; a group that is not valid UTF-8 becomes one U+FFFD per byte.
// Immutable after construction.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"

namespace actord::tok {

class Decoder {
 public:
  static Result<Decoder> from_json(const nlohmann::json& j, const std::string& where);

  std::string decode(std::vector<std::string> tokens) const;
  // True when the chain contains ByteFallback (so `<0xXX>` tokens combine across token boundaries).
  bool has_byte_fallback() const;

 private:
  enum class Kind { replace, byte_fallback, fuse, strip, metaspace };
  struct Step {
    Kind kind = Kind::fuse;
    std::string a, b;  // replace pattern/content, strip content char, metaspace replacement
    std::size_t start = 0, stop = 0;
    bool prepend = true;  // metaspace: prepend_scheme != never
  };
  static Status parse_into(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps);

  bool present_ = false;    // false: no decoder, tokens joined with " "
  std::vector<Step> steps_;  // Sequence flattened
};

// Parses "<0xXX>" (exactly 6 bytes, as tokenizers checks); returns -1 when `token` is not a byte token.
int parse_byte_token(const std::string& token);

}  // namespace actord::tok
