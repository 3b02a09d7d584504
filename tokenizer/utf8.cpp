#include "tokenizer/utf8.hpp"

namespace actord::tok {

namespace {

// Expected sequence length from the lead byte, 0 when the byte cannot start a character.
std::size_t lead_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Length of the valid character at s[i], or 0 when the bytes there are not a valid character.
std::size_t valid_len(std::string_view s, std::size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = lead_len(p[i]);
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((p[i + k] & 0xC0) != 0x80) return 0;
  }
  if (n == 3) {
    if (p[i] == 0xE0 && p[i + 1] < 0xA0) return 0;   // overlong
    if (p[i] == 0xED && p[i + 1] >= 0xA0) return 0;  // surrogate
  } else if (n == 4) {
    if (p[i] == 0xF0 && p[i + 1] < 0x90) return 0;   // overlong
    if (p[i] == 0xF4 && p[i + 1] >= 0x90) return 0;  // > U+10FFFF
  }
  return n;
}

}  // namespace

std::size_t next_char_len(std::string_view s, std::size_t i) {
  const std::size_t n = valid_len(s, i);
  return n == 0 ? 1 : n;
}

char32_t decode_char(std::string_view s, std::size_t i, std::size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = valid_len(s, i);
  if (len) *len = n == 0 ? 1 : n;
  switch (n) {
    case 1: return p[i];
    case 2: return (char32_t(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
    case 3: return (char32_t(p[i] & 0x0F) << 12) | (char32_t(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
    case 4:
      return (char32_t(p[i] & 0x07) << 18) | (char32_t(p[i + 1] & 0x3F) << 12) | (char32_t(p[i + 2] & 0x3F) << 6) |
             (p[i + 3] & 0x3F);
    default: return 0xFFFD;
  }
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = valid_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (is_unicode_whitespace(cp)) return false;
  if (cp >= 0x2000 && cp <= 0x206F) return false;  // general punctuation
  if (cp >= 0x3000 && cp <= 0x303F) return false;  // CJK punctuation
  if (cp >= 0xA1 && cp <= 0xBF) return false;      // Latin-1 punctuation and symbols
  if (cp == 0xD7 || cp == 0xF7) return false;
  return true;
}

}  // namespace actord::tok
