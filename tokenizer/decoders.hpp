// Decoders of HF tokenizer.json (internal header).
//
// Contract: `Decoder::from_json` accepts null, Sequence, Replace (String or Regex pattern), ByteFallback, Fuse,
// Strip (content, start, stop), Metaspace and ByteLevel, with tokenizers' decode_chain semantics; other types
// give Errc::unsupported naming the type. `decode` turns token strings into text: each step maps the token list,
// then the pieces are joined with "" (with no decoder at all, joined with " " as tokenizers does).
// ByteFallback gathers consecutive `<0xXX>` tokens; a group that is not valid UTF-8 becomes one U+FFFD per byte.
// ByteLevel maps every token back through the GPT-2 byte table (a token with a character outside the table keeps
// its own bytes), joins all bytes and decodes them as String::from_utf8_lossy (one U+FFFD per maximal invalid
// subpart). Immutable after construction.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"
#include "tokenizer/regex.hpp"

namespace actord::tok {

class Decoder {
 public:
  static Result<Decoder> from_json(const nlohmann::json& j, const std::string& where);

  std::string decode(std::vector<std::string> tokens) const;
  // The bytes one token adds in the middle of a text: every step as decode applies it to that token, but for the
  // rules of a text's start (Metaspace's dropped first replacement; a Strip after Fuse, which strips the joined
  // text) and with raw bytes where decode would make U+FFFD (a byte-fallback token's byte, ByteLevel's bytes).
  std::string token_bytes(const std::string& token) const;
  // True when the chain contains ByteFallback (so `<0xXX>` tokens combine across token boundaries).
  bool has_byte_fallback() const;

 private:
  enum class Kind { replace, replace_regex, byte_fallback, fuse, strip, metaspace, byte_level };
  struct Step {
    Kind kind = Kind::fuse;
    std::string a, b;  // replace pattern/content, strip content char, metaspace replacement
    std::size_t start = 0, stop = 0;
    bool prepend = true;  // metaspace: prepend_scheme != never
    Regex regex;          // replace_regex
  };
  static Status parse_into(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps);

  bool present_ = false;    // false: no decoder, tokens joined with " "
  std::vector<Step> steps_;  // Sequence flattened
};

// Parses "<0xXX>" (exactly 6 bytes, as tokenizers checks); returns -1 when `token` is not a byte token.
int parse_byte_token(const std::string& token);

}  // namespace actord::tok
