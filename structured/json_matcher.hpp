// JsonMatcher: whether a byte stream is a prefix of one JSON object or array (RFC 8259) that a JsonSchema admits,
// fed a byte at a time: what a response_format of json_object (JsonSchema::any_object(), the default) or
// json_schema (or a constrained tool_choice) constrains a sequence's generated text to.
//
// Contract: feed(b) returns false when b cannot continue such a text from here, and then leaves the matcher as it
// was (so a caller may try another byte); true moves it on. complete() is true once the root value has closed; after it
// only one more gap of whitespace, and none comes before the root. Whitespace between tokens is a gap of llama.cpp's
// JSON grammars (its json-schema-to-grammar's space rule): nothing, one space, or one or two newlines and up to
// kMaxIndent spaces or tabs; numbers take up to kMaxNumberBytes bytes (exponents up to
// kMaxExponentDigits digits: every number a finite double), nesting goes to kMaxDepth: bounds that keep a model from
// looping on whitespace or digits; no byte taken leads to a state that cannot end (a value, or an optional
// property, that could not close within kMaxDepth levels is not begun). Strings take any UTF-8 text but
// control characters, and the JSON escapes (\uXXXX with 4 hex digits, surrogates only in pairs); invalid UTF-8
// (overlong forms, surrogates, bytes past U+10FFFF) is refused. Under a schema (json_schema.hpp) each value must be
// of its node's kind: an object's keys are its properties' names as the schema writes them, in its order, every
// required one present; arrays and strings keep their bounds (in characters: an escaped surrogate pair is one);
// enum / const values are matched byte for byte; a tagged union's object goes on as the alternative its tag's value
// names; a string with a pattern or format decodes its escapes (all but \uXXXX, which it never takes) and holds its
// text to the regex, a number with bounds holds its text to theirs. The schema must outlive the matcher.
// The state is a fixed-size value: copies are cheap (token masks copy it once per prefix of the tokens' trie they
// feed).
#pragma once

#include <array>
#include <cstdint>

#include "structured/json_schema.hpp"

namespace actord::structured {

class JsonMatcher {
 public:
  static constexpr int kMaxDepth = JsonSchema::kMaxNesting;
  static constexpr int kMaxIndent = 20;
  static constexpr int kMaxNumberBytes = 32;
  static constexpr int kMaxExponentDigits = 2;

  explicit JsonMatcher(const JsonSchema& schema = JsonSchema::any_object()) : schema_(&schema) {}

  bool feed(uint8_t b);
  // feed without the roll-back: when false the matcher is left in no useful state (for a copy to be dropped).
  bool advance(uint8_t b) { return step(b); }
  bool complete() const { return mode_ == Mode::done; }
  // Inside a string's text, between characters: how many more characters of plain string text (no '"', '\\' or
  // control character, whole UTF-8 characters) it takes and stays here: kUnbounded in a string without a maximum
  // length (or a key of an object with any keys), what is left below the maximum in one with; -1 elsewhere (a key
  // or an enum value of a schema, within a character, after a high surrogate's escape).
  static constexpr int64_t kUnbounded = INT64_MAX;
  int64_t plain_text_room() const;
  // Inside the text of a string with a pattern or format: a key of what it takes before its closing quote, of
  // texts of at most `token_chars` characters (the pattern, its regex's state, whether an escape is open, the room
  // below a maximum length as RegexMatcher::room), equal for matchers that take the same such texts there; -1
  // elsewhere. in_pattern_text(): there, and a '"' would close the string (no escape open).
  int64_t pattern_text_key(uint32_t token_chars) const;
  bool in_pattern_text() const { return mode_ == Mode::pattern_string; }

 private:
  enum class Mode : uint8_t {
    start,          // before the root: whitespace, then its { or [
    value,          // a value is due: after ':' or ','
    key_or_close,   // after '{': a key or '}'
    key,            // after ',' in an object: a key
    colon,          // after a key
    after_value,    // after a value: ',' or the closing bracket of the innermost container
    value_or_close, // after '[': a value or ']'
    string,         // inside a string (a key of an object with any keys when in_key_)
    escape,         // after a backslash in a string
    unicode,        // in the hex digits of \uXXXX (hex_left_ to go)
    number,         // in a number (number_ is its DFA state)
    literal,        // in true / false / null (literal_: what is left of it)
    property,       // in a key of an object with properties: candidates_ are the names it may still be
    literal_set,    // in an enum / const value: candidates_ are the values it may still be
    pattern_string, // inside a string of a pattern or format: regex_state_ is its regex's state on the decoded text
    pattern_escape, // after a backslash in such a string
    pattern_number, // in a number with bounds: regex_state_ is its regex's state on the number's text
    done,           // the root has closed
  };
  // The number grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
  enum class Num : uint8_t { minus, zero, integer, dot, fraction, exp, exp_sign, exponent };
  // An open object or array: its node, and its next property's index (object) or its elements so far (array).
  struct Frame {
    int16_t node;
    uint16_t count;
    char container;
  };

  bool step(uint8_t b);  // feed without the roll-back
  bool start_value(uint8_t b);
  bool close_value();     // a value ended: after_value, or done at the top level
  bool gap(uint8_t b);    // a whitespace byte between tokens: false where the gap's rule refuses it
  bool push(char container, int32_t node);
  bool string_byte(uint8_t b);
  bool property_byte(uint8_t b);
  bool literal_byte(uint8_t b);
  bool pattern_byte(uint8_t b);  // the pattern modes
  const Regex& regex() const { return schema_->pattern(node(node_).pattern); }
  bool in_tag() const;            // the value due or read is the tag of the innermost object, a tagged union
  bool close_literal(int value);  // an enum / const value ended: a tag's value makes the object its alternative
  bool begin_key();       // '"' of a key in the innermost object
  bool may_close_object() const;
  bool may_add(const Frame& f) const;     // ',' in the innermost container
  uint64_t key_candidates() const;
  bool may_close_array(const Frame& f) const;
  bool may_add_key(const SchemaNode& s) const;
  const SchemaNode& node(int32_t n) const { return schema_->node(n); }
  Frame& top() { return stack_[static_cast<size_t>(depth_ - 1)]; }
  const Frame& top() const { return stack_[static_cast<size_t>(depth_ - 1)]; }
  static bool number_may_end(Num n);

  const JsonSchema* schema_;
  std::array<Frame, kMaxDepth> stack_{};
  uint64_t candidates_ = 0;        // property / literal_set: a bit per name or value still possible
  uint32_t chars_ = 0;             // the string's characters so far (a pattern's too, under a maximum length)
  int32_t regex_state_ = 0;        // the pattern modes
  int16_t value_node_ = JsonSchema::kRoot;  // the node of the value due (value modes, start)
  int16_t node_ = 0;               // the node of the string, number or literal being read
  uint16_t offset_ = 0;            // property / literal_set: bytes matched
  int8_t depth_ = 0;
  Mode mode_ = Mode::start;
  bool in_key_ = false;
  Num number_ = Num::minus;
  uint8_t number_bytes_ = 0;
  uint8_t exponent_digits_ = 0;
  uint8_t gap_ = 0;                // this gap so far (gap())
  uint8_t utf8_left_ = 0;          // continuation bytes still due in a string's character
  uint8_t utf8_low_ = 0x80, utf8_high_ = 0xBF;  // the range of the next continuation byte
  uint8_t hex_left_ = 0;
  uint16_t code_ = 0;              // the \uXXXX escape's value so far
  bool pending_low_ = false;       // the string's last character was a high surrogate's \u escape: a low one's is due
  const char* literal_ = nullptr;  // the rest of true / false / null
};

}  // namespace actord::structured
