#include "tokenizer/added_vocabulary.hpp"

#include "tokenizer/bpe_model.hpp"
#include "tokenizer/utf8.hpp"

namespace actord::tok {

namespace {

bool flag(const nlohmann::json& j, const char* key, bool dflt) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : dflt;
}

// Code point of the last character of s[0, end).
char32_t last_char(std::string_view s, std::size_t end, std::size_t* start) {
  std::size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && end - k < 4) --k;
  if (start) *start = k;
  return decode_char(s, k, nullptr);
}

}  // namespace

Result<AddedVocabulary> AddedVocabulary::from_json(const nlohmann::json& added, const Normalizer& normalizer,
                                                   const std::string& where) {
  AddedVocabulary v;
  if (added.is_null()) return v;
  if (!added.is_array()) return make_error(Errc::parse_error, where + ": 'added_tokens' is not a list");
  try {
    for (const auto& a : added) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      const auto id = token_id_of(a.at("id"));
      if (!id) {
        return make_error(Errc::parse_error, where + ": added token '" + t.content + "' has a bad id (ids are integers from 0 to " +
                                                 std::to_string(kMaxTokenId - 1) + ")");
      }
      t.id = *id;
      t.special = flag(a, "special", false);
      t.lstrip = flag(a, "lstrip", false);
      t.rstrip = flag(a, "rstrip", false);
      t.single_word = flag(a, "single_word", false);
      t.normalized = flag(a, "normalized", !t.special);
      t.match = t.normalized ? normalizer.apply(t.content) : t.content;
      if (t.content.empty()) continue;
      v.by_id_[t.id] = v.tokens_.size();
      v.by_content_[t.content] = v.tokens_.size();
      v.tokens_.push_back(std::move(t));
    }
    for (auto& table : v.by_first_byte_) table.resize(256);
    for (std::size_t i = 0; i < v.tokens_.size(); ++i) {
      const AddedToken& t = v.tokens_[i];
      if (!t.match.empty()) v.by_first_byte_[t.normalized ? 1 : 0][static_cast<unsigned char>(t.match[0])].push_back(i);
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::parse_error, where + ": bad added_tokens entry: " + e.what());
  }
  return v;
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::find_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

void AddedVocabulary::split(std::string_view text, bool at_origin, bool normalized_pass,
                            std::vector<Piece>& out) const {
  std::size_t emitted = 0;  // end of the last piece pushed
  auto push_text = [&](std::size_t b, std::size_t e) {
    if (e > b) out.push_back(Piece{std::string(text.substr(b, e - b)), std::nullopt, at_origin && b == 0});
  };
  if (by_first_byte_[0].empty()) {  // no added tokens at all
    push_text(0, text.size());
    return;
  }
  const auto& table = by_first_byte_[normalized_pass ? 1 : 0];
  std::size_t pos = 0;
  while (pos < text.size()) {
    // Leftmost-longest: the first position where some token matches, then the longest token there.
    const AddedToken* best = nullptr;
    std::size_t at = pos;
    for (; at < text.size() && !best; ++at) {
      for (std::size_t idx : table[static_cast<unsigned char>(text[at])]) {
        const AddedToken& t = tokens_[idx];
        if (text.compare(at, t.match.size(), t.match) != 0) continue;
        if (!best || t.match.size() > best->match.size()) best = &t;
      }
    }
    if (!best) break;
    --at;
    std::size_t start = at, stop = at + best->match.size();
    pos = stop;  // the search resumes after the match whether or not it is kept
    if (best->single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_char(text, start, nullptr));
      const bool stop_ok = stop == text.size() || !is_word_char(decode_char(text, stop, nullptr));
      if (!start_ok || !stop_ok) continue;
    }
    if (best->lstrip) {
      while (start > emitted) {
        std::size_t k = 0;
        if (!is_unicode_whitespace(last_char(text, start, &k))) break;
        start = k;
      }
    }
    if (best->rstrip) {
      while (stop < text.size()) {
        std::size_t n = 0;
        if (!is_unicode_whitespace(decode_char(text, stop, &n))) break;
        stop += n;
      }
      pos = stop;
    }
    push_text(emitted, start);
    out.push_back(Piece{std::string(), best->id, at_origin && start == 0});
    emitted = stop;
  }
  push_text(emitted, text.size());
}

}  // namespace actord::tok
