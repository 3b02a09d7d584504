// Marks in a streamed text (tags such as <tool_call> or </think>): how much of a text's end may be one arriving, and
// where its text after leading whitespace begins (the tool-call and reasoning readers).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string_view>

namespace actord {

// The index of the first byte of `text` that is not ASCII whitespace (its size when there is none).
inline size_t first_non_space(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  return i;
}

// The length of the longest end of `text` that `mark` begins with, shorter than the mark (a mark that may still be
// arriving: held back until the text after it shows).
inline size_t partial_mark(std::string_view text, std::string_view mark) {
  for (size_t n = std::min(text.size(), mark.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == mark.substr(0, n)) return n;
  return 0;
}

}  // namespace actord
