#include "tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.hpp"

namespace actord::tok {

namespace {

// Unicode White_Space (what Oniguruma's \s matches in tokenizers, and Rust's char::is_whitespace), as class items.
// PCRE2's UCP \s also matches U+180E (it is in PCRE2's \h list), which Oniguruma does not.
constexpr const char* kWhiteSpaceItems =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Rewrites \s (in and out of character classes) and \S (outside classes) into explicit White_Space classes so
// PCRE2 agrees with Oniguruma. Only escapes are rewritten; \Q...\E quoting is copied as is.
std::string translate(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 64);
  int depth = 0;  // inside [...] (POSIX [:name:] items do not change it)
  bool quoted = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (quoted) {
      if (c == '\\' && i + 1 < p.size() && p[i + 1] == 'E') {
        quoted = false;
        out += "\\E";
        ++i;
      } else {
        out += c;
      }
      continue;
    }
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 'Q') {
        quoted = true;
        out += "\\Q";
      } else if (e == 's') {
        out += depth > 0 ? std::string(kWhiteSpaceItems) : "[" + std::string(kWhiteSpaceItems) + "]";
      } else if (e == 'S' && depth == 0) {
        out += "[^" + std::string(kWhiteSpaceItems) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[') {
      if (depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class inside a class: copy to ":]"
        const std::size_t end = p.find(":]", i + 2);
        if (end != std::string::npos) {
          out.append(p, i, end + 2 - i);
          i = end + 1;
          continue;
        }
      }
      ++depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && depth > 0) --depth;
    out += c;
  }
  return out;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

Result<Regex> Regex::compile(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = translate(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return make_error(Errc::parse_error, "bad regex '" + pattern + "' at offset " + std::to_string(offset) + ": " +
                                             reinterpret_cast<const char*>(msg));
  }
  auto c = std::make_shared<Code>();
  c->code = code;
  c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.code_ = std::move(c);
  return r;
}

Result<Regex> Regex::literal(const std::string& literal) {
  // \Q...\E quotes everything except a literal "\E", which is spliced in as an escaped backslash + 'E'.
  std::string p = "\\Q";
  for (std::size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'E') {
      p += "\\E\\\\E\\Q";
      ++i;
    } else {
      p += literal[i];
    }
  }
  p += "\\E";
  return compile(p);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (!code_ || s.empty()) return out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  if (!md) return out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  std::size_t pos = 0;
  uint32_t options = 0;
  while (pos <= s.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, s.size(), pos, options, md, nullptr)
                        : PCRE2_ERROR_NOMATCH - 1;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {  // no JIT, or JIT stack exhausted: the interpreter (heap frames)
      rc = pcre2_match(code_->code, subject, s.size(), pos, options, md, nullptr);
    }
    if (rc < 0) break;
    options = PCRE2_NO_UTF_CHECK;  // checked once on the first call
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      pos = e;
    } else {
      if (e >= s.size()) break;
      pos = e + next_char_len(s, e);
    }
  }
  pcre2_match_data_free(md);
  return out;
}

std::string Regex::replace_all(std::string_view s, std::string_view content) const {
  std::string out;
  std::size_t prev = 0;
  for (const auto& [b, e] : find_all(s)) {
    out.append(s.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace actord::tok
