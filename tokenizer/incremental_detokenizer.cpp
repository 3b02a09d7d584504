#include "tokenizer/incremental_detokenizer.hpp"

#include <string_view>

namespace actord {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_special_(skip_special_tokens) {}

std::string IncrementalDetokenizer::window_text(std::size_t begin, std::size_t end) const {
  if (begin >= end) return {};
  std::vector<int32_t> window(ids_.begin() + begin, ids_.begin() + end);
  return tok_->decode(window, skip_special_);
}

std::string IncrementalDetokenizer::push(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (skip_special_ && tok_->is_special(id)) continue;  // decode would drop it anyway
    // So would it an id without a token (past the vocabulary, a hole in it, a model's padded logits): kept, it would
    // end a byte run here that decode() joins with the bytes after it.
    if (!tok_->id_to_token(id)) continue;
    ids_.push_back(id);
  }
  if (ids_.size() == read_offset_) return {};
  if (tok_->is_byte_token(ids_.back())) return {};  // a byte run may still grow
  if (!prefix_text_) prefix_text_ = window_text(prefix_offset_, read_offset_);
  const std::string& prefix = *prefix_text_;
  const std::string full = window_text(prefix_offset_, ids_.size());
  if (full.size() <= prefix.size() || full.compare(0, prefix.size(), prefix) != 0 || ends_with(full, kReplacement)) {
    return {};
  }
  std::string out = full.substr(prefix.size());
  // The emitted ids become the next window's prefix, unless alone they decode to nothing: then a start rule (a Strip
  // decoder of more than one character) would strip through them into the next token, which it does not do in
  // decode(), so the window keeps its older start. Their text is the next push's prefix either way.
  std::string emitted_alone = window_text(read_offset_, ids_.size());
  if (emitted_alone.empty()) {
    prefix_text_ = full;
  } else {
    prefix_offset_ = read_offset_;
    prefix_text_ = std::move(emitted_alone);
  }
  read_offset_ = ids_.size();
  emitted_bytes_ += out.size();
  return out;
}

std::string IncrementalDetokenizer::finish() {
  // Whatever the window rules held back: the rest of the full decode, which the emitted text is a prefix of.
  const std::string all = tok_->decode(ids_, skip_special_);
  std::string out = all.size() > emitted_bytes_ ? all.substr(emitted_bytes_) : std::string();
  prefix_offset_ = read_offset_ = ids_.size();
  prefix_text_.reset();
  emitted_bytes_ = all.size();
  return out;
}

}  // namespace actord
