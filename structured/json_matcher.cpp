#include "structured/json_matcher.hpp"

#include <cstddef>

namespace actord::structured {

namespace {

bool is_space(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

}  // namespace

bool JsonObjectMatcher::feed(uint8_t b) {
  const JsonObjectMatcher before = *this;
  if (step(b)) return true;
  *this = before;
  return false;
}

bool JsonObjectMatcher::gap(uint8_t b) {
  if (gap_ == 0) {
    if (b != ' ' && b != '\n') return false;
    gap_ = b == ' ' ? 1 : 2;
    return true;
  }
  if (gap_ == 1 || (b != ' ' && b != '\t') || gap_ - 2 >= kMaxIndent) return false;
  ++gap_;
  return true;
}

bool JsonObjectMatcher::push(char container) {
  if (depth_ >= kMaxDepth) return false;
  stack_[static_cast<std::size_t>(depth_++)] = container;
  return true;
}

bool JsonObjectMatcher::number_may_end(Num n) {
  return n == Num::zero || n == Num::integer || n == Num::fraction || n == Num::exponent;
}

bool JsonObjectMatcher::close_value() {
  mode_ = depth_ == 0 ? Mode::done : Mode::after_value;
  gap_ = 0;
  return true;
}

bool JsonObjectMatcher::start_value(uint8_t b) {
  gap_ = 0;
  switch (b) {
    case '{':
      if (!push('{')) return false;
      mode_ = Mode::key_or_close;
      return true;
    case '[':
      if (!push('[')) return false;
      mode_ = Mode::value_or_close;
      return true;
    case '"':
      mode_ = Mode::string;
      in_key_ = false;
      utf8_left_ = 0;
      return true;
    case 't':
      literal_ = "rue";
      mode_ = Mode::literal;
      return true;
    case 'f':
      literal_ = "alse";
      mode_ = Mode::literal;
      return true;
    case 'n':
      literal_ = "ull";
      mode_ = Mode::literal;
      return true;
    default:
      if (b != '-' && !is_digit(b)) return false;
      mode_ = Mode::number;
      number_ = b == '-' ? Num::minus : b == '0' ? Num::zero : Num::integer;
      number_bytes_ = 1;
      return true;
  }
}

bool JsonObjectMatcher::step(uint8_t b) {
  switch (mode_) {
    case Mode::start:
      if (is_space(b)) return gap(b);
      if (b != '{') return false;
      return start_value(b);
    case Mode::done:
      return is_space(b) && gap(b);
    case Mode::value:
      if (is_space(b)) return gap(b);
      return start_value(b);
    case Mode::value_or_close:
      if (is_space(b)) return gap(b);
      if (b == ']') {
        --depth_;
        return close_value();
      }
      return start_value(b);
    case Mode::key_or_close:
    case Mode::key:
      if (is_space(b)) return gap(b);
      if (b == '}' && mode_ == Mode::key_or_close) {
        --depth_;
        return close_value();
      }
      if (b != '"') return false;
      gap_ = 0;
      mode_ = Mode::string;
      in_key_ = true;
      utf8_left_ = 0;
      return true;
    case Mode::colon:
      if (is_space(b)) return gap(b);
      if (b != ':') return false;
      gap_ = 0;
      mode_ = Mode::value;
      return true;
    case Mode::after_value:
      if (is_space(b)) return gap(b);
      gap_ = 0;
      if (b == ',') {
        mode_ = stack_[static_cast<std::size_t>(depth_ - 1)] == '{' ? Mode::key : Mode::value;
        return true;
      }
      if (b != (stack_[static_cast<std::size_t>(depth_ - 1)] == '{' ? '}' : ']')) return false;
      --depth_;
      return close_value();
    case Mode::string:
      if (utf8_left_ > 0) {  // a continuation byte of a multi-byte character
        if (b < utf8_low_ || b > utf8_high_) return false;
        --utf8_left_;
        utf8_low_ = 0x80;
        utf8_high_ = 0xBF;
        return true;
      }
      if (b == '"') {
        if (in_key_) {
          mode_ = Mode::colon;
          gap_ = 0;
          return true;
        }
        return close_value();
      }
      if (b == '\\') {
        mode_ = Mode::escape;
        return true;
      }
      if (b < 0x20) return false;  // control characters must be escaped
      if (b < 0x80) return true;
      // A lead byte (RFC 3629): the count of continuation bytes and the range of the first one.
      if (b >= 0xC2 && b <= 0xDF) {
        utf8_left_ = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        utf8_left_ = 2;
        if (b == 0xE0) utf8_low_ = 0xA0;   // no overlong forms
        if (b == 0xED) utf8_high_ = 0x9F;  // no surrogates
      } else if (b >= 0xF0 && b <= 0xF4) {
        utf8_left_ = 3;
        if (b == 0xF0) utf8_low_ = 0x90;
        if (b == 0xF4) utf8_high_ = 0x8F;  // nothing past U+10FFFF
      } else {
        return false;
      }
      return true;
    case Mode::escape:
      switch (b) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          mode_ = Mode::string;
          return true;
        case 'u':
          mode_ = Mode::unicode;
          hex_left_ = 4;
          return true;
        default:
          return false;
      }
    case Mode::unicode:
      if (!is_hex(b)) return false;
      if (--hex_left_ == 0) mode_ = Mode::string;
      return true;
    case Mode::literal:
      if (b != static_cast<uint8_t>(*literal_)) return false;
      if (*++literal_ == '\0') return close_value();
      return true;
    case Mode::number: {
      Num next = number_;
      bool in_number = true;
      switch (number_) {
        case Num::minus:
          if (!is_digit(b)) return false;
          next = b == '0' ? Num::zero : Num::integer;
          break;
        case Num::zero:
          if (b == '.') next = Num::dot;
          else if (b == 'e' || b == 'E') next = Num::exp;
          else in_number = false;
          break;
        case Num::integer:
          if (is_digit(b)) next = Num::integer;
          else if (b == '.') next = Num::dot;
          else if (b == 'e' || b == 'E') next = Num::exp;
          else in_number = false;
          break;
        case Num::dot:
          if (!is_digit(b)) return false;
          next = Num::fraction;
          break;
        case Num::fraction:
          if (is_digit(b)) next = Num::fraction;
          else if (b == 'e' || b == 'E') next = Num::exp;
          else in_number = false;
          break;
        case Num::exp:
          if (b == '+' || b == '-') next = Num::exp_sign;
          else if (is_digit(b)) next = Num::exponent;
          else return false;
          break;
        case Num::exp_sign:
          if (!is_digit(b)) return false;
          next = Num::exponent;
          break;
        case Num::exponent:
          if (is_digit(b)) next = Num::exponent;
          else in_number = false;
          break;
      }
      if (in_number) {
        if (++number_bytes_ > kMaxNumberBytes) return false;
        number_ = next;
        return true;
      }
      // The number ended (never the top-level value: that is an object); b comes after it.
      if (!number_may_end(number_)) return false;
      close_value();
      return step(b);
    }
  }
  return false;
}

}  // namespace actord::structured
