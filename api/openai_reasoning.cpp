#include "api/openai_reasoning.hpp"

#include <algorithm>

#include "api/text_marks.hpp"

namespace actord {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";


size_t leading_newlines(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && s[i] == '\n') ++i;
  return i;
}

size_t trailing_newlines(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && s[s.size() - 1 - i] == '\n') ++i;
  return i;
}

}  // namespace

bool reasoning_template(const ChatTemplate& chat_template) {
  return chat_template.source().find(kOpen) != std::string::npos;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kClose);
  return close == std::string_view::npos || close < open;
}

ReasoningReader::ReasoningReader(bool opened_in_prompt)
    : state_(opened_in_prompt ? State::reasoning : State::before) {}

ReasoningReader::Delta ReasoningReader::push(std::string_view text, bool at_end) {
  Delta out;
  held_ += text;
  for (;;) {
    if (state_ == State::before) {
      const size_t start = first_non_space(held_);
      const std::string_view rest = std::string_view(held_).substr(start);
      if (rest.rfind(kOpen, 0) == 0) {
        held_.erase(0, start + kOpen.size());
        state_ = State::reasoning;
        continue;
      }
      if (!at_end && kOpen.substr(0, rest.size()) == rest) break;  // whitespace, or the tag's start, so far
      state_ = State::content;
      content_started_ = true;  // no block: the reply is content as it is
      continue;
    }
    if (state_ == State::reasoning) {
      if (!reasoning_started_) {  // newlines at the reasoning's start are trimmed
        held_.erase(0, leading_newlines(held_));
        if (held_.empty() && !at_end) break;
      }
      const size_t close = held_.find(kClose);
      const std::string_view before = std::string_view(held_).substr(0, close);
      // Newlines at the reasoning's end are trimmed: they wait until text follows them, as does a tag's start.
      size_t keep = close == std::string::npos && !at_end ? partial_mark(before, kClose) : 0;
      keep += trailing_newlines(before.substr(0, before.size() - keep));
      const std::string_view ready = before.substr(0, before.size() - keep);
      out.reasoning += ready;
      if (!ready.empty()) reasoning_started_ = true;
      if (close == std::string::npos) {
        held_.erase(0, at_end ? held_.size() : ready.size());
        break;
      }
      held_.erase(0, close + kClose.size());
      state_ = State::content;
      continue;
    }
    // Content: newlines at its start (after the block) are trimmed.
    if (!content_started_) {
      held_.erase(0, leading_newlines(held_));
      if (held_.empty()) break;
      content_started_ = true;
    }
    out.content += held_;
    held_.clear();
    break;
  }
  return out;
}

}  // namespace actord
