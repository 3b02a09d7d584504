#include "tokenizer/pre_tokenizers.hpp"

#include <algorithm>

#include "tokenizer/byte_level.hpp"
#include "tokenizer/normalizers.hpp"
#include "tokenizer/unicode.hpp"
#include "tokenizer/utf8.hpp"

namespace actord::tok {

namespace {

// tokenizers' pre_tokenizers/byte_level.rs RE.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

using Span = std::pair<std::size_t, std::size_t>;
using Match = std::pair<Span, bool>;  // span, is a match

// tokenizers' Pattern::find_matches: the whole string covered by alternating non-match / match spans.
std::vector<Match> cover(std::size_t len, const std::vector<Span>& found, bool invert) {
  std::vector<Match> out;
  if (len == 0) return {{{0, 0}, false}};
  std::size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (prev != b) out.push_back({{prev, b}, invert});
    out.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev != len) out.push_back({{prev, len}, invert});
  return out;
}

// tokenizers' NormalizedString::split: returns the kept spans (possibly empty; the caller drops empty words).
std::vector<Span> split_spans(std::vector<Match> matches, PreTokenizer::Behavior behavior) {
  using B = PreTokenizer::Behavior;
  std::vector<Span> out;
  switch (behavior) {
    case B::isolated:
      for (const auto& m : matches) out.push_back(m.first);
      break;
    case B::removed:
      for (const auto& m : matches) {
        if (!m.second) out.push_back(m.first);
      }
      break;
    case B::contiguous: {
      bool prev_match = false;
      for (const auto& [span, is_match] : matches) {
        if (is_match == prev_match && !out.empty()) {
          out.back().second = span.second;
        } else {
          out.push_back(span);
        }
        prev_match = is_match;
      }
      break;
    }
    case B::merged_with_previous: {
      bool prev_match = false;
      for (const auto& [span, is_match] : matches) {
        if (is_match && !prev_match && !out.empty()) {
          out.back().second = span.second;
        } else {
          out.push_back(span);
        }
        prev_match = is_match;
      }
      break;
    }
    case B::merged_with_next: {
      bool prev_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        const auto& [span, is_match] = *it;
        if (is_match && !prev_match && !out.empty()) {
          out.back().first = span.first;
        } else {
          out.push_back(span);
        }
        prev_match = is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

Result<PreTokenizer::Behavior> parse_behavior(const nlohmann::json& j, const std::string& where) {
  using B = PreTokenizer::Behavior;
  const std::string s = j.is_string() ? j.get<std::string>() : "";
  if (s == "Removed") return B::removed;
  if (s == "Isolated") return B::isolated;
  if (s == "MergedWithPrevious") return B::merged_with_previous;
  if (s == "MergedWithNext") return B::merged_with_next;
  if (s == "Contiguous") return B::contiguous;
  return make_error(Errc::unsupported, where + ": Split behavior '" + s + "' is not supported");
}

}  // namespace

Status PreTokenizer::parse_into(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps) {
  if (j.is_null()) return Status::success();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error(Errc::parse_error, where + ": pre_tokenizer has no 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return make_error(Errc::parse_error, where + ": pre_tokenizer Sequence has no 'pretokenizers' list");
    }
    for (const auto& sub : j["pretokenizers"]) ACTORD_TRY_STATUS(parse_into(sub, where, steps));
    return Status::success();
  }
  Step m;
  if (type == "Metaspace") {
    m.kind = Kind::metaspace;
    m.replacement = j.value("replacement", m.replacement);
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "always") {
        m.prepend = Prepend::always;
      } else if (s == "first") {
        m.prepend = Prepend::first;
      } else if (s == "never") {
        m.prepend = Prepend::never;
      } else {
        return make_error(Errc::unsupported, where + ": Metaspace prepend_scheme '" + s + "' is not supported");
      }
    } else {
      m.prepend = j.value("add_prefix_space", true) ? Prepend::always : Prepend::never;
    }
    m.split = j.value("split", true);
  } else if (type == "ByteLevel") {
    m.kind = Kind::byte_level;
    m.add_prefix_space = j.value("add_prefix_space", true);
    m.use_regex = j.value("use_regex", true);
    if (m.use_regex) {
      auto re = Regex::compile(kGpt2Pattern);
      if (!re.ok()) return make_error(Errc::parse_error, where + ": ByteLevel: " + re.error().message);
      m.regex = std::move(re).value();
    }
  } else if (type == "Split") {
    m.kind = Kind::split;
    const auto& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    Result<Regex> re = make_error(Errc::parse_error, where + ": Split has no String or Regex pattern");
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      re = Regex::compile(pat["Regex"].get<std::string>());
    } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      re = Regex::literal(pat["String"].get<std::string>());
    }
    if (!re.ok()) return make_error(re.error().code, where + ": pre_tokenizer Split: " + re.error().message);
    m.regex = std::move(re).value();
    auto b = parse_behavior(j.contains("behavior") ? j["behavior"] : nlohmann::json(), where);
    if (!b.ok()) return b.error();
    m.behavior = *b;
    m.invert = j.value("invert", false);
  } else if (type == "Digits") {
    m.kind = Kind::digits;
    m.individual_digits = j.value("individual_digits", false);
  } else {
    return make_error(Errc::unsupported, where + ": pre_tokenizer type '" + type + "' is not supported");
  }
  steps.push_back(std::move(m));
  return Status::success();
}

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  try {
    ACTORD_TRY_STATUS(parse_into(j, where, p.steps_));
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::parse_error, where + ": bad pre_tokenizer: " + e.what());
  }
  return p;
}

bool PreTokenizer::needs_valid_utf8() const {
  for (const Step& st : steps_) {
    if (st.kind != Kind::metaspace) return true;
  }
  return false;
}

bool PreTokenizer::has_byte_level() const {
  for (const Step& st : steps_) {
    if (st.kind == Kind::byte_level) return true;
  }
  return false;
}

void PreTokenizer::apply(const Step& st, Word& word, std::vector<Word>& next) {
  std::string& w = word.first;  // not a structured binding: clang 14 (the fuzz build) cannot capture those
  const bool origin = word.second;
  auto push_spans = [&](const std::string& s, const std::vector<Span>& spans) {
    for (const auto& [b, e] : spans) {
      if (e > b) next.emplace_back(s.substr(b, e - b), origin && b == 0);
    }
  };
  switch (st.kind) {
    case Kind::metaspace: {
      std::string s = replace_all(w, " ", st.replacement);
      const bool starts = s.compare(0, st.replacement.size(), st.replacement) == 0;
      if (!starts && (st.prepend == Prepend::always || (st.prepend == Prepend::first && origin))) {
        s.insert(0, st.replacement);
      }
      if (!st.split || st.replacement.empty()) {
        if (!s.empty()) next.emplace_back(std::move(s), origin);
        return;
      }
      // MergedWithNext: every replacement character starts a new word.
      std::size_t begin = 0;
      bool first = true;
      for (std::size_t k = s.find(st.replacement, 1); k != std::string::npos; k = s.find(st.replacement, k + 1)) {
        next.emplace_back(s.substr(begin, k - begin), origin && first);
        first = false;
        begin = k;
      }
      if (begin < s.size()) next.emplace_back(s.substr(begin), origin && first);
      return;
    }
    case Kind::byte_level: {
      const std::string s = st.add_prefix_space && (w.empty() || w[0] != ' ') ? " " + w : w;
      if (!st.use_regex) {
        if (!s.empty()) next.emplace_back(byte_level_encode(s), origin);
        return;
      }
      const auto spans = split_spans(cover(s.size(), st.regex.find_all(s), false), Behavior::isolated);
      for (const auto& [b, e] : spans) {
        if (e > b) next.emplace_back(byte_level_encode(std::string_view(s).substr(b, e - b)), origin && b == 0);
      }
      return;
    }
    case Kind::split:
      push_spans(w, split_spans(cover(w.size(), st.regex.find_all(w), st.invert), st.behavior));
      return;
    case Kind::digits: {
      std::vector<Span> found;
      for (std::size_t i = 0; i < w.size();) {
        std::size_t n = 0;
        const char32_t c = decode_char(w, i, &n);
        if (is_numeric(c)) found.emplace_back(i, i + n);
        i += n;
      }
      push_spans(w, split_spans(cover(w.size(), found, false),
                                st.individual_digits ? Behavior::isolated : Behavior::contiguous));
      return;
    }
  }
}

void PreTokenizer::split(const std::string& piece, bool at_origin, std::vector<std::string>& out) const {
  std::vector<Word> words{{piece, at_origin}};
  for (const Step& st : steps_) {
    std::vector<Word> next;
    for (Word& w : words) apply(st, w, next);
    words = std::move(next);
  }
  for (auto& [w, origin] : words) {
    if (!w.empty()) out.push_back(std::move(w));
  }
}

}  // namespace actord::tok
