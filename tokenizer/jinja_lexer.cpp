// Lexer of the chat template Jinja subset (see jinja_lexer.hpp).
#include "tokenizer/jinja_lexer.hpp"

#include <cstring>

#include "tokenizer/jinja_value.hpp"

namespace actord::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string rstrip_ws(std::string s) {
  while (!s.empty() && is_ws(s.back())) s.pop_back();
  return s;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // jinja2: newlines normalized to \n, and (keep_trailing_newline=False) one trailing newline dropped.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool strip_next = false;
    const size_t n = src_.size();
    while (true) {
      if (strip_next)
        while (pos_ < n && is_ws(src_[pos_])) ++pos_;
      strip_next = false;
      const size_t text_begin = pos_;
      size_t t = pos_;
      while (true) {
        t = src_.find('{', t);
        if (t == std::string::npos || t + 1 >= n) {
          t = std::string::npos;
          break;
        }
        const char c = src_[t + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++t;
      }
      std::string text = src_.substr(pos_, t == std::string::npos ? std::string::npos : t - pos_);
      if (t == std::string::npos) {
        emit_text(std::move(text), text_begin);
        break;
      }
      const char kind = src_[t + 1];
      size_t p = t + 2;
      char mod = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) mod = src_[p++];
      if (mod == '-') {
        text = rstrip_ws(std::move(text));
      } else if (mod != '+' && kind != '{') {
        lstrip_block(text, text_begin);
      }
      emit_text(std::move(text), text_begin);
      const int tag_line = line_at(t);
      if (kind == '#') {
        const size_t q = src_.find("#}", p);
        if (q == std::string::npos) fail(Errc::parse_error, tag_line, "unterminated comment");
        pos_ = q + 2;
        if (q > p && src_[q - 1] == '-')
          strip_next = true;
        else if (!(q > p && src_[q - 1] == '+') && pos_ < n && src_[pos_] == '\n')
          ++pos_;
        continue;
      }
      pos_ = p;
      const size_t first_token = out_.size();
      out_.push_back({kind == '{' ? T::var_begin : T::block_begin, "", tag_line});
      strip_next = lex_tag(kind, tag_line);
      // {% raw %} ... {% endraw %}: the content is text.
      if (kind == '%' && out_.size() == first_token + 3 && out_[first_token + 1].type == T::name &&
          out_[first_token + 1].s == "raw") {
        out_.resize(first_token);
        strip_next = lex_raw(tag_line);
      }
    }
    out_.push_back({T::eof, "", line_at(src_.size())});
    return std::move(out_);
  }

 private:
  int line_at(size_t p) {
    if (p < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < p && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
    return line_;
  }

  void emit_text(std::string text, size_t begin) {
    if (!text.empty()) out_.push_back({T::text, std::move(text), line_at(begin)});
  }

  // lstrip_blocks: spaces/tabs between the start of a line and a block or comment tag are removed.
  void lstrip_block(std::string& text, size_t text_begin) const {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    const bool line_starting = text_begin == 0 || src_[text_begin - 1] == '\n';
    if (l_pos == 0 && !line_starting) return;
    for (size_t i = l_pos; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return;
    text.resize(l_pos);
  }

  bool starts(std::string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }

  // Lexes the inside of a tag up to and including its end; returns whether whitespace after it is stripped.
  bool lex_tag(char kind, int tag_line) {
    const size_t n = src_.size();
    int depth = 0;
    while (true) {
      while (pos_ < n && is_ws(src_[pos_])) ++pos_;
      if (pos_ >= n)
        fail(Errc::parse_error, tag_line,
             kind == '{' ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      const int line = line_at(pos_);
      if (depth == 0) {
        if (kind == '{' && (starts("-}}") || starts("}}"))) {
          const bool strip = src_[pos_] == '-';
          pos_ += strip ? 3 : 2;
          out_.push_back({T::var_end, "", line});
          return strip;
        }
        if (kind == '%' && (starts("-%}") || starts("+%}") || starts("%}"))) {
          const char m = src_[pos_];
          pos_ += (m == '-' || m == '+') ? 3 : 2;
          out_.push_back({T::block_end, "", line});
          if (m == '-') return true;
          if (m != '+' && pos_ < n && src_[pos_] == '\n') ++pos_;  // trim_blocks
          return false;
        }
      }
      const char c = src_[pos_];
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < n && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
        out_.push_back({T::name, src_.substr(pos_, e - pos_), line});
        pos_ = e;
      } else if (is_digit(c)) {
        lex_number(line);
      } else if (c == '\'' || c == '"') {
        lex_string(line);
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                          ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        const char* found = nullptr;
        for (const char* op : ops)
          if (starts(op)) {
            found = op;
            break;
          }
        if (!found) fail(Errc::parse_error, line, std::string("unexpected character '") + c + "'");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') {
          if (depth == 0) fail(Errc::parse_error, line, std::string("unexpected '") + c + "'");
          --depth;
        }
        out_.push_back({T::op, found, line});
        pos_ += std::strlen(found);
      }
    }
  }

  void lex_number(int line) {
    const size_t n = src_.size();
    size_t e = pos_;
    std::string digits;
    while (e < n && (is_digit(src_[e]) || src_[e] == '_')) {
      if (src_[e] != '_') digits += src_[e];
      ++e;
    }
    bool is_float = false;
    if (e + 1 < n && src_[e] == '.' && is_digit(src_[e + 1])) {
      is_float = true;
      digits += '.';
      ++e;
      while (e < n && (is_digit(src_[e]) || src_[e] == '_')) {
        if (src_[e] != '_') digits += src_[e];
        ++e;
      }
    }
    if (e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < n && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < n && is_digit(src_[k])) {
        is_float = true;
        digits += 'e';
        digits += src_.substr(e + 1, k - e - 1);
        e = k;
        while (e < n && is_digit(src_[e])) digits += src_[e++];
      }
    }
    Token tok{is_float ? T::floating : T::integer, digits, line};
    try {
      if (is_float)
        tok.f = std::stod(digits);
      else
        tok.i = std::stoll(digits);
    } catch (...) {
      fail(Errc::parse_error, line, "number out of range: " + digits);
    }
    out_.push_back(std::move(tok));
    pos_ = e;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Python string literal escapes (jinja2 unescapes string literals the same way).
  void lex_string(int line) {
    const size_t n = src_.size();
    const char q = src_[pos_++];
    std::string s;
    while (true) {
      if (pos_ >= n) fail(Errc::parse_error, line, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == q) break;
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= n) fail(Errc::parse_error, line, "unterminated string literal");
      const char e = src_[pos_++];
      switch (e) {
        case 'n':
          s += '\n';
          break;
        case 't':
          s += '\t';
          break;
        case 'r':
          s += '\r';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'v':
          s += '\v';
          break;
        case 'a':
          s += '\a';
          break;
        case '0':
          s += '\0';
          break;
        case '\\':
          s += '\\';
          break;
        case '\'':
          s += '\'';
          break;
        case '"':
          s += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + len > n) fail(Errc::parse_error, line, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            const char h = src_[pos_ + k];
            cp <<= 4;
            if (is_digit(h))
              cp |= static_cast<uint32_t>(h - '0');
            else if (h >= 'a' && h <= 'f')
              cp |= static_cast<uint32_t>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              cp |= static_cast<uint32_t>(h - 'A' + 10);
            else
              fail(Errc::parse_error, line, "invalid \\" + std::string(1, e) + " escape");
          }
          if (cp > 0x10FFFF) fail(Errc::parse_error, line, "invalid \\U escape");
          pos_ += len;
          append_utf8(s, cp);
          break;
        }
        default:  // Python keeps unknown escapes as written
          s += '\\';
          s += e;
      }
    }
    out_.push_back({T::string, std::move(s), line});
  }

  // After {% raw %}: everything up to {% endraw %} is text. Returns whether whitespace after it is stripped.
  bool lex_raw(int line) {
    const size_t n = src_.size();
    size_t search = pos_;
    while (true) {
      const size_t t = src_.find("{%", search);
      if (t == std::string::npos) fail(Errc::parse_error, line, "missing end of raw directive");
      size_t p = t + 2;
      char mod = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) mod = src_[p++];
      while (p < n && is_ws(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = t + 2;
        continue;
      }
      p += 6;
      while (p < n && is_ws(src_[p])) ++p;
      char end_mod = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) end_mod = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) {
        search = t + 2;
        continue;
      }
      std::string text = src_.substr(pos_, t - pos_);
      if (mod == '-')
        text = rstrip_ws(std::move(text));
      else if (mod != '+')
        lstrip_block(text, pos_);
      emit_text(std::move(text), pos_);
      pos_ = p + 2;
      if (end_mod == '-') return true;
      if (end_mod != '+' && pos_ < n && src_[pos_] == '\n') ++pos_;
      return false;
    }
  }

  std::string src_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source) {
  Lexer lexer(source);
  return lexer.run();
}

}  // namespace actord::jinja
