#include "tokenizer/token_texts.hpp"

namespace actord {

TokenTexts::TokenTexts(const Tokenizer& tok, std::span<const int32_t> context)
    : tok_(&tok), detokenizer_(tok, true, context) {}

void TokenTexts::extend(std::span<const int32_t> ids, bool last) {
  if (ended_) return;
  for (int32_t id : ids) {
    const bool special = tok_->is_special(id);
    offsets_.push_back(shown_bytes_);
    special_.push_back(special);
    if (special) {
      texts_.push_back(tok_->id_to_token(id).value_or(""));
      continue;
    }
    texts_.push_back(detokenizer_.push({id}));
    shown_bytes_ += texts_.back().size();
  }
  if (!last) return;
  ended_ = true;
  const std::string rest = detokenizer_.finish();
  if (rest.empty()) return;
  // To the last token the text belongs to (not a special token shown by name).
  for (size_t i = texts_.size(); i-- > 0;) {
    if (special_[i]) continue;
    texts_[i] += rest;
    for (size_t j = i + 1; j < offsets_.size(); ++j) offsets_[j] += rest.size();
    break;
  }
  shown_bytes_ += rest.size();
}

std::string TokenTexts::after(const Tokenizer& tok, std::span<const int32_t> before, int32_t id) {
  if (tok.is_special(id)) return tok.id_to_token(id).value_or("");
  IncrementalDetokenizer detok(tok, true, before);
  std::string text = detok.push({id});
  return text + detok.finish();
}

}  // namespace actord
