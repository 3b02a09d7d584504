#include "tokenizer/incremental_detokenizer.hpp"

#include <algorithm>
#include <string_view>

namespace actord {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens,
                                               std::span<const int32_t> context)
    : tok_(&tok), skip_special_(skip_special_tokens) {
  // The kept context ids of kContextReach from its end: the prompt before them is never read.
  for (auto it = context.rbegin(); it != context.rend() && ids_.size() < kContextReach; ++it)
    if (kept(*it)) ids_.push_back(*it);
  std::reverse(ids_.begin(), ids_.end());
  if (ids_.empty()) return;
  // The window starts kContextTokens back, not inside a byte run (ByteFallback decodes a run as a whole: cut, its
  // text would change), at a token that decodes to something alone (the rule push() keeps).
  std::size_t begin = ids_.size() > kContextTokens ? ids_.size() - kContextTokens : 0;
  while (begin > 0 && tok_->is_byte_token(ids_[begin]) && tok_->is_byte_token(ids_[begin - 1])) --begin;
  if (ids_.size() - begin > kLongestByteRun) {
    ids_.clear();  // a run too long to decode at every push (or reaching past what was read): the ids' own text
    return;
  }
  while (begin + 1 < ids_.size() && window_text(begin, begin + 1).empty()) ++begin;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(begin));
  std::string text = window_text(0, ids_.size());
  if (ends_with(text, kReplacement)) {
    ids_.clear();  // it ends inside a character
    return;
  }
  read_offset_ = ids_.size();
  context_in_byte_run_ = tok_->is_byte_token(ids_.back());
  prefix_text_ = std::move(text);
  emitted_bytes_ = prefix_text_->size();
}

bool IncrementalDetokenizer::kept(int32_t id) const {
  if (skip_special_ && tok_->is_special(id)) return false;  // decode would drop it anyway
  // So would it an id without a token (past the vocabulary, a hole in it, a model's padded logits): kept, it would
  // end a byte run here that decode() joins with the bytes after it.
  return tok_->id_to_token(id).has_value();
}

void IncrementalDetokenizer::append(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (!kept(id)) continue;
    if (context_in_byte_run_) {
      // The context's last byte run ends here unless this id is a byte too: then the run (whose decode, as a whole,
      // may yet turn every byte of it into U+FFFD) would change text counted as the context's; go without it.
      context_in_byte_run_ = false;
      if (tok_->is_byte_token(id)) {
        ids_.clear();
        prefix_offset_ = read_offset_ = emitted_bytes_ = 0;
        prefix_text_.reset();
      }
    }
    ids_.push_back(id);
  }
}

std::string IncrementalDetokenizer::window_text(std::size_t begin, std::size_t end) const {
  if (begin >= end) return {};
  std::vector<int32_t> window(ids_.begin() + begin, ids_.begin() + end);
  return tok_->decode(window, skip_special_);
}

std::string IncrementalDetokenizer::push(const std::vector<int32_t>& ids) {
  append(ids);
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
