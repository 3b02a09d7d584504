// Code points for the text grammars (regex.hpp, grammar.hpp): sets of code point ranges, and the pieces of their
// patterns that name characters (one UTF-8 character, a hex escape's digits).
//
// Contract: sets are sorted and merged ranges without the surrogates (U+D800-U+DFFF are never characters of UTF-8
// text); readers return nothing where the bytes are not what they read, and the caller names the fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace actord::structured {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodeRange {
  uint32_t lo, hi;  // inclusive
};
using CodeSet = std::vector<CodeRange>;

// Sorted, merged, the surrogates left out.
CodeSet normalized(CodeSet s);
// Every character that `s` does not hold.
CodeSet complement(const CodeSet& s);
bool contains(const CodeSet& s, uint32_t cp);
// Whether `s` holds a character in [lo, hi].
bool intersects(const CodeSet& s, uint32_t lo, uint32_t hi);

// Whether b continues a UTF-8 character (10xxxxxx): every other byte begins one. Characters are counted by the bytes
// that are not (a length bound's count, a token's characters).
constexpr bool utf8_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// The UTF-8 character at text[i]: its code point and its length in bytes; nothing for bytes that are not one (a
// stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short).
std::optional<std::pair<uint32_t, int>> utf8_at(std::string_view text, size_t i);
// The character of `digits` hex digits at text[i]; nothing when they are not all hex digits or name no character.
std::optional<uint32_t> hex_at(std::string_view text, size_t i, int digits);

}  // namespace actord::structured
