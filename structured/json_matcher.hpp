// JsonObjectMatcher: whether a byte stream is a prefix of one JSON object (RFC 8259), fed a byte at a time: what a
// response_format of json_object constrains a sequence's generated text to.
//
// Contract: feed(b) returns false when b cannot continue a JSON object text from here, and then leaves the matcher
// as it was (so a caller may try another byte); true moves it on. complete() is true once the object has closed;
// after it only one more gap of whitespace. Whitespace between tokens is a gap of llama.cpp's JSON grammars: nothing,
// one space, or a newline and up to kMaxIndent spaces or tabs; numbers take up to kMaxNumberBytes bytes, nesting
// goes to kMaxDepth: bounds that keep a model from looping on whitespace or digits. Strings take any UTF-8 text but
// control characters, and the JSON escapes (\uXXXX with 4 hex digits); invalid UTF-8 (overlong forms, surrogates,
// bytes past U+10FFFF) is refused. The state is a fixed-size value: copies are cheap (token masks copy it once per
// prefix of the tokens' trie they feed).
#pragma once

#include <array>
#include <cstdint>

namespace actord::structured {

class JsonObjectMatcher {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxIndent = 20;
  static constexpr int kMaxNumberBytes = 32;

  bool feed(uint8_t b);
  // feed without the roll-back: when false the matcher is left in no useful state (for a copy to be dropped).
  bool advance(uint8_t b) { return step(b); }
  bool complete() const { return mode_ == Mode::done; }
  // Inside a string's text, between characters: any text of plain string bytes (no '"', '\\' or control character,
  // whole UTF-8 characters) is taken and leaves the matcher here.
  bool in_string_text() const { return mode_ == Mode::string && utf8_left_ == 0; }

 private:
  enum class Mode : uint8_t {
    start,          // before the object: whitespace, then '{'
    value,          // a value is due: after ':' or ','
    key_or_close,   // after '{': a key or '}'
    key,            // after ',' in an object: a key
    colon,          // after a key
    after_value,    // after a value: ',' or the closing bracket of the innermost container
    value_or_close, // after '[': a value or ']'
    string,         // inside a string (a key when in_key_)
    escape,         // after a backslash in a string
    unicode,        // in the hex digits of \uXXXX (hex_left_ to go)
    number,         // in a number (number_ is its DFA state)
    literal,        // in true / false / null (literal_: what is left of it)
    done,           // the object has closed
  };
  // The number grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
  enum class Num : uint8_t { minus, zero, integer, dot, fraction, exp, exp_sign, exponent };

  bool step(uint8_t b);  // feed without the roll-back
  bool start_value(uint8_t b);
  bool close_value();     // a value ended: after_value, or done at the top level
  bool gap(uint8_t b);    // a whitespace byte between tokens: false where the gap's rule refuses it
  bool push(char container);
  static bool number_may_end(Num n);

  std::array<char, kMaxDepth> stack_{};  // '{' or '[' per open container
  int8_t depth_ = 0;
  Mode mode_ = Mode::start;
  bool in_key_ = false;
  Num number_ = Num::minus;
  uint8_t number_bytes_ = 0;
  uint8_t gap_ = 0;                // this gap so far: 0 nothing, 1 a space, 2 + k a newline and k indents
  uint8_t utf8_left_ = 0;          // continuation bytes still due in a string's character
  uint8_t utf8_low_ = 0x80, utf8_high_ = 0xBF;  // the range of the next continuation byte
  uint8_t hex_left_ = 0;
  const char* literal_ = nullptr;  // the rest of true / false / null
};

}  // namespace actord::structured
