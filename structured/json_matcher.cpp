#include "structured/json_matcher.hpp"

#include <algorithm>
#include <cstddef>

namespace actord::structured {

namespace {

bool is_space(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

using Kind = SchemaNode::Kind;

// Objects of any keys: under an any node, or of an object schema without properties.
bool any_keys(const SchemaNode& s) { return s.kind == Kind::any || s.any_keys; }

// Of the texts `candidates` marks (a bit per index), those whose byte at `offset` is b; text(i) is text i.
template <class Text>
uint64_t continuing(uint64_t candidates, size_t offset, uint8_t b, Text&& text) {
  uint64_t next = 0;
  for (uint64_t c = candidates; c; c &= c - 1) {
    const int i = __builtin_ctzll(c);
    const std::string& t = text(i);
    if (offset < t.size() && static_cast<uint8_t>(t[offset]) == b) next |= uint64_t{1} << i;
  }
  return next;
}

// The first of the texts `candidates` marks that is `length` bytes long, or -1.
template <class Text>
int ending(uint64_t candidates, size_t length, Text&& text) {
  for (uint64_t c = candidates; c; c &= c - 1)
    if (text(__builtin_ctzll(c)).size() == length) return __builtin_ctzll(c);
  return -1;
}

}  // namespace

int64_t JsonMatcher::plain_text_room() const {
  if (mode_ != Mode::string || utf8_left_ != 0 || pending_low_) return -1;
  const uint32_t max = node(node_).max_length;
  if (in_key_ || max == UINT32_MAX) return kUnbounded;
  return int64_t{max} - chars_;
}

int64_t JsonMatcher::pattern_text_key(uint32_t token_chars) const {
  if (mode_ != Mode::pattern_string && mode_ != Mode::pattern_escape) return -1;
  // 15 bits of pattern (kMaxNodes), 20 of state (kMaxDfaStates), 1 of escape, 27 of room (what is left is a token's
  // characters and a state's fewest to a match: far below 2^27).
  const uint32_t room = std::min(regex().room(chars_, token_chars), (1u << 27) - 1);
  return int64_t{node(node_).pattern} << 48 | int64_t{regex_state_} << 28 | int64_t{room} << 1 |
         (mode_ == Mode::pattern_escape ? 1 : 0);
}

bool JsonMatcher::feed(uint8_t b) {
  const JsonMatcher before = *this;
  if (step(b)) return true;
  *this = before;
  return false;
}

bool JsonMatcher::gap(uint8_t b) {
  // gap_: 0 nothing yet, 1 a space (nothing may follow), 2 a newline, 3 two, 3 + k k indents after them.
  if (gap_ == 0) {
    if (b != ' ' && b != '\n') return false;
    gap_ = b == ' ' ? 1 : 2;
    return true;
  }
  if (gap_ == 2 && b == '\n') {
    gap_ = 3;
    return true;
  }
  if (gap_ == 1 || (b != ' ' && b != '\t')) return false;
  const int indents = gap_ > 3 ? gap_ - 3 : 0;
  if (indents >= kMaxIndent) return false;
  gap_ = static_cast<uint8_t>(4 + indents);
  return true;
}

bool JsonMatcher::push(char container, int32_t n) {
  if (depth_ >= kMaxDepth) return false;
  stack_[static_cast<std::size_t>(depth_++)] = Frame{static_cast<int16_t>(n), 0, container};
  return true;
}

bool JsonMatcher::may_close_object() const {
  const SchemaNode& s = node(top().node);
  if (any_keys(s)) return true;
  for (size_t i = top().count; i < s.properties.size(); ++i)
    if (s.properties[i].required) return false;
  return true;
}

bool JsonMatcher::may_add(const Frame& f) const {
  const SchemaNode& s = node(f.node);
  if (f.container == '[') return f.count < s.max_items && depth_ + schema_->min_nesting(s.items) <= kMaxDepth;
  return any_keys(s) ? may_add_key(s) : key_candidates() != 0;
}

// The properties the innermost object's next key may name: from its next property on, up to the first required one
// (the optional ones before it may be left out), less those whose value could not close within kMaxDepth.
uint64_t JsonMatcher::key_candidates() const {
  const SchemaNode& s = node(top().node);
  uint64_t candidates = 0;
  for (size_t i = top().count; i < s.properties.size(); ++i) {
    if (depth_ + schema_->min_nesting(s.properties[i].node) <= kMaxDepth) candidates |= uint64_t{1} << i;
    if (s.properties[i].required) break;
  }
  return candidates;
}

// A key of an object with any keys may begin when its value could close within kMaxDepth.
bool JsonMatcher::may_add_key(const SchemaNode& s) const { return depth_ + schema_->min_nesting(s.values) <= kMaxDepth; }

bool JsonMatcher::may_close_array(const Frame& f) const { return f.count >= node(f.node).min_items; }

bool JsonMatcher::begin_key() {
  gap_ = 0;
  if (any_keys(node(top().node))) {
    if (!may_add_key(node(top().node))) return false;
    mode_ = Mode::string;
    in_key_ = true;
    utf8_left_ = 0;
    return true;
  }
  candidates_ = key_candidates();
  if (candidates_ == 0) return false;
  offset_ = 0;
  mode_ = Mode::property;
  return true;
}

bool JsonMatcher::property_byte(uint8_t b) {
  const auto& props = node(top().node).properties;
  auto name = [&](int i) -> const std::string& { return props[static_cast<size_t>(i)].name; };
  if (const uint64_t next = continuing(candidates_, offset_, b, name)) {  // a '"' a name continues with is escaped
    candidates_ = next;
    ++offset_;
    return true;
  }
  const int i = b == '"' ? ending(candidates_, offset_, name) : -1;
  if (i < 0) return false;
  top().count = static_cast<uint16_t>(i + 1);
  value_node_ = static_cast<int16_t>(props[static_cast<size_t>(i)].node);
  mode_ = Mode::colon;
  gap_ = 0;
  return true;
}

bool JsonMatcher::literal_byte(uint8_t b) {
  const auto& values = node(node_).literals;
  auto value = [&](int i) -> const std::string& { return values[static_cast<size_t>(i)]; };
  const uint64_t next = continuing(candidates_, offset_, b, value);
  if (!next) {  // a value that ended here (a number, whose end only its next byte shows) is followed by b
    const int i = ending(candidates_, offset_, value);
    if (i < 0) return false;
    close_literal(i);
    return step(b);
  }
  candidates_ = next;
  ++offset_;
  for (uint64_t c = next; c; c &= c - 1)
    if (value(__builtin_ctzll(c)).size() != offset_) return true;
  return close_literal(__builtin_ctzll(next));  // every value still possible is whole: one, as they differ
}

bool JsonMatcher::pattern_byte(uint8_t b) {
  const Regex& re = regex();
  // The byte the regex reads for b: the text's own byte, or an escape's character.
  uint8_t text = b;
  switch (mode_) {
    case Mode::pattern_string:
      if (b == '"') return re.accepting(regex_state_) && close_value();
      if (b == '\\') {  // an escape, when the regex takes one of the characters escapes write
        for (const uint8_t c : {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'}) {
          if (uint32_t chars = chars_; re.next_within(regex_state_, chars, c) != Regex::kDead) {
            mode_ = Mode::pattern_escape;
            return true;
          }
        }
        return false;
      }
      if (b < 0x20) return false;  // control characters must be escaped
      break;
    case Mode::pattern_escape:
      switch (b) {
        case '"': case '\\': case '/': break;
        case 'b': text = '\b'; break;
        case 'f': text = '\f'; break;
        case 'n': text = '\n'; break;
        case 'r': text = '\r'; break;
        case 't': text = '\t'; break;
        default: return false;  // \uXXXX is never taken: every character it could write has a shorter form here
      }
      mode_ = Mode::pattern_string;
      break;
    default: {  // pattern_number: a byte the regex does not take ends the number, when it may end here
      const int32_t next = re.next(regex_state_, b);
      if (next != Regex::kDead) {
        regex_state_ = next;
        return true;
      }
      if (!re.accepting(regex_state_)) return false;
      close_value();
      return step(b);
    }
  }
  const int32_t next = re.next_within(regex_state_, chars_, text);
  if (next == Regex::kDead) return false;
  regex_state_ = next;
  return true;
}

bool JsonMatcher::in_tag() const {
  return depth_ > 0 && top().container == '{' && top().count == 1 && !node(top().node).tags.empty();
}

bool JsonMatcher::close_literal(int i) {
  if (in_tag()) top().node = static_cast<int16_t>(node(top().node).tags[static_cast<size_t>(i)]);
  return close_value();
}

bool JsonMatcher::number_may_end(Num n) {
  return n == Num::zero || n == Num::integer || n == Num::fraction || n == Num::exponent;
}

bool JsonMatcher::close_value() {
  mode_ = depth_ == 0 ? Mode::done : Mode::after_value;
  gap_ = 0;
  if (depth_ > 0 && top().container == '[' && top().count < UINT16_MAX) ++top().count;
  return true;
}

bool JsonMatcher::start_value(uint8_t b) {
  gap_ = 0;
  const int32_t n = schema_->resolve(value_node_, b);
  if (n < 0 || depth_ + schema_->min_nesting(n) > kMaxDepth) return false;  // it could never close
  node_ = static_cast<int16_t>(n);
  if (node(n).kind == Kind::literals) {  // every value, narrowed by b
    const size_t count = node(n).literals.size();
    candidates_ = count == 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
    if (in_tag()) {  // a tagged union's tag: only values whose alternative can close within kMaxDepth
      const auto& tags = node(top().node).tags;
      for (size_t i = 0; i < count; ++i)
        if (depth_ - 1 + schema_->min_nesting(tags[i]) > kMaxDepth) candidates_ &= ~(uint64_t{1} << i);
    }
    offset_ = 0;
    mode_ = Mode::literal_set;
    return literal_byte(b);
  }
  // resolve() took b: it begins a value of the node's kind (or of any kind).
  switch (b) {
    case '{':
      if (!push('{', n)) return false;
      mode_ = Mode::key_or_close;
      return true;
    case '[':
      if (!push('[', n)) return false;
      mode_ = Mode::value_or_close;
      return true;
    case '"':
      if (node(n).pattern >= 0) {
        mode_ = Mode::pattern_string;
        regex_state_ = regex().start();
        chars_ = 0;
        return true;
      }
      mode_ = Mode::string;
      in_key_ = false;
      utf8_left_ = 0;
      chars_ = 0;
      pending_low_ = false;
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
      if (node(n).pattern >= 0) {
        mode_ = Mode::pattern_number;
        regex_state_ = regex().start();
        return pattern_byte(b);
      }
      if (b != '-' && !is_digit(b)) return false;
      mode_ = Mode::number;
      number_ = b == '-' ? Num::minus : b == '0' ? Num::zero : Num::integer;
      number_bytes_ = 1;
      return true;
  }
}

bool JsonMatcher::step(uint8_t b) {
  switch (mode_) {
    case Mode::start:
      if (b != '{' && b != '[') return false;  // the root: an object or an array, first
      return start_value(b);
    case Mode::done:
      return is_space(b) && gap(b);
    case Mode::value:
      if (is_space(b)) return gap(b);
      return start_value(b);
    case Mode::value_or_close:
      if (is_space(b)) return gap(b);
      if (b == ']') {
        if (!may_close_array(top())) return false;
        --depth_;
        return close_value();
      }
      if (!may_add(top())) return false;
      value_node_ = static_cast<int16_t>(node(top().node).items);
      return start_value(b);
    case Mode::key_or_close:
    case Mode::key:
      if (is_space(b)) return gap(b);
      if (b == '}' && mode_ == Mode::key_or_close) {
        if (!may_close_object()) return false;
        --depth_;
        return close_value();
      }
      if (b != '"') return false;
      return begin_key();
    case Mode::property:
      return property_byte(b);
    case Mode::literal_set:
      return literal_byte(b);
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
        if (!may_add(top())) return false;
        const bool object = top().container == '{';
        mode_ = object ? Mode::key : Mode::value;
        if (!object) value_node_ = static_cast<int16_t>(node(top().node).items);
        return true;
      }
      if (b != (top().container == '{' ? '}' : ']')) return false;
      if (top().container == '{' ? !may_close_object() : !may_close_array(top())) return false;
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
        if (pending_low_) return false;
        if (in_key_) {
          mode_ = Mode::colon;
          value_node_ = static_cast<int16_t>(node(top().node).values);
          gap_ = 0;
          return true;
        }
        if (chars_ < node(node_).min_length) return false;
        return close_value();
      }
      if (b < 0x20) return false;  // control characters must be escaped
      // A character begins (an escape, an ASCII byte or a lead byte).
      if (!in_key_ && !pending_low_ && chars_ >= node(node_).max_length) return false;  // a pair's low half is free
      if (b == '\\') {
        mode_ = Mode::escape;
        ++chars_;
        return true;
      }
      if (pending_low_) return false;  // a high surrogate's escape: its low one's is due
      if (b < 0x80) {
        ++chars_;
        return true;
      }
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
      ++chars_;
      return true;
    case Mode::escape:
      switch (b) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          if (pending_low_) return false;
          mode_ = Mode::string;
          return true;
        case 'u':
          mode_ = Mode::unicode;
          hex_left_ = 4;
          code_ = 0;
          return true;
        default:
          return false;
      }
    case Mode::unicode: {
      if (!is_hex(b)) return false;
      const auto digit = static_cast<uint16_t>(is_digit(b) ? b - '0' : (b | 0x20) - 'a' + 10);
      // Surrogates come in pairs (as nlohmann and most parsers require): after a high one's escape only a low one's
      // (\uDC00-\uDFFF), and a low one nowhere else; checked digit by digit, so that no byte taken leads nowhere.
      if (hex_left_ == 4 && pending_low_ && digit != 0xD) return false;
      if (hex_left_ == 3 && code_ == 0xD && (digit >= 0xC) != pending_low_) return false;
      code_ = static_cast<uint16_t>(code_ << 4 | digit);
      if (--hex_left_ > 0) return true;
      mode_ = Mode::string;
      if (pending_low_) --chars_;  // \uD83D\uDE00 is one character (U+1F600)
      pending_low_ = code_ >= 0xD800 && code_ <= 0xDBFF;
      return true;
    }
    case Mode::pattern_string:
    case Mode::pattern_escape:
    case Mode::pattern_number:
      return pattern_byte(b);
    case Mode::literal:
      if (b != static_cast<uint8_t>(*literal_)) return false;
      if (*++literal_ == '\0') return close_value();
      return true;
    case Mode::number: {
      Num next = number_;
      bool in_number = true;
      if (node(node_).kind == Kind::integer && (b == '.' || b == 'e' || b == 'E')) return false;
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
        // Within kMaxNumberBytes with room left to end it (no byte taken leads nowhere), and exponents of at most
        // kMaxExponentDigits digits: every number is then a finite double (nlohmann refuses 1e999).
        const int to_end = next == Num::exp_sign || next == Num::exp || next == Num::dot ? 1 : 0;
        if (number_bytes_ + 1 + to_end > kMaxNumberBytes) return false;
        if (next == Num::exponent) {
          exponent_digits_ = number_ == Num::exponent ? exponent_digits_ + 1 : 1;
          if (exponent_digits_ > kMaxExponentDigits) return false;
        }
        ++number_bytes_;
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
