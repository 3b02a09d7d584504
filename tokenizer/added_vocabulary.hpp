// Added tokens of HF tokenizer.json (internal header).
//
// Contract: holds the `added_tokens` entries (content, id, special, lstrip, rstrip, single_word, normalized) and
// splits text on them the way tokenizers' AddedVocabulary does: leftmost-longest match; a single_word token only
// matches when not touching word characters; lstrip/rstrip let the match swallow neighbouring whitespace.
// Tokens with normalized=false are matched on the raw input, tokens with normalized=true on each normalized
// piece (their content normalized with the same normalizer). Immutable after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"
#include "tokenizer/normalizers.hpp"

namespace actord::tok {

struct AddedToken {
  std::string content;  // as in the file
  std::string match;    // what is searched for (content, normalized when `normalized`)
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// One piece of split text: either plain text (id empty) or an added token.
struct Piece {
  std::string text;
  std::optional<int32_t> id;
  bool at_origin = false;  // starts at byte 0 of the original input
};

class AddedVocabulary {
 public:
  static Result<AddedVocabulary> from_json(const nlohmann::json& added_tokens, const Normalizer& normalizer,
                                           const std::string& where);

  // Splits `text` on the added tokens whose normalized flag equals `normalized_pass`; pieces with text are
  // plain text, the others carry the token id. Empty plain pieces are dropped.
  void split(std::string_view text, bool at_origin, bool normalized_pass, std::vector<Piece>& out) const;

  const AddedToken* find_id(int32_t id) const;
  std::optional<int32_t> find_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, std::size_t> by_id_;
  std::unordered_map<std::string, std::size_t> by_content_;
  // Indices into tokens_ by the first byte of `match`, for the raw [0] and the normalized [1] pass.
  std::vector<std::vector<std::size_t>> by_first_byte_[2];
};

}  // namespace actord::tok
