// Small UTF-8 helpers shared by the tokenizer pieces (internal header).
//
// Contract: pure functions, no allocation beyond the returned strings, no global state. Invalid input never
// aborts: `next_char_len` treats a bad lead byte as a 1-byte character so callers always make progress.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actord::tok {

// Byte length of the UTF-8 character starting at s[i] (1 for invalid or truncated sequences), clamped to the
// remaining length.
std::size_t next_char_len(std::string_view s, std::size_t i);

// Code point of the character at s[i] (U+FFFD when invalid); `len` receives its byte length as next_char_len.
char32_t decode_char(std::string_view s, std::size_t i, std::size_t* len);

// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, char32_t cp);

// True when `s` is entirely valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as Rust's
// String::from_utf8 decides.
bool is_valid_utf8(std::string_view s);

// Rust's char::is_whitespace (Unicode White_Space).
bool is_unicode_whitespace(char32_t cp);

// Rust's char::is_alphanumeric, approximated: ASCII letters/digits and every non-ASCII code point that is not
// whitespace or in the common punctuation blocks. Used only for the added-token `single_word` flag.
bool is_word_char(char32_t cp);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace actord::tok
