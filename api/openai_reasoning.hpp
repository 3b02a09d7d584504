// Reasoning on /v1/chat/completions: the `<think>...</think>` block that reasoning models (Qwen3, DeepSeek R1, QwQ)
// write before their answer, given apart as the message's `reasoning_content` (the field vLLM and DeepSeek's API
// use), the answer as its `content`.
//
// Contract:
// - A chat template that writes `<think>` marks a reasoning model (reasoning_template); the server's
//   `reasoning_parser` (auto: where the template does; none: never) decides whether replies are split at all.
//   Replies whose text is constrained (response_format json_object / json_schema / regex / grammar, tool_choice
//   required or named) are not: their text is what the constraint made.
// - The block either opens in the prompt (DeepSeek R1's template ends its generation prompt with `<think>\n`:
//   prompt_opens_reasoning) or at the reply's start (Qwen3 writes `<think>` itself; leading whitespace before it
//   is dropped). Without either the whole reply is content. Reasoning is the text up to `</think>`, content what
//   follows, with newlines trimmed as Qwen3's template trims them when it renders a reasoning_content back:
//   reasoning without the newlines at its ends, content without those at its start. A reply cut off inside the
//   block (max_tokens) is all reasoning.
// - ReasoningReader reads one choice's text as it streams: what is surely reasoning or content goes out at once,
//   only a tail that may be the start of a tag or newlines that may need trimming wait; pushed whole or a byte at a
//   time, it gives the same reasoning and content.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/chat_template.hpp"

namespace actord {

bool reasoning_template(const ChatTemplate& chat_template);
// Whether a rendered prompt leaves a `<think>` block open (its last <think> after its last </think>).
bool prompt_opens_reasoning(std::string_view prompt);

class ReasoningReader {
 public:
  explicit ReasoningReader(bool opened_in_prompt);

  struct Delta {
    std::string reasoning, content;
  };
  // The next piece of the choice's text; with at_end, its last (what was held back comes out too).
  Delta push(std::string_view text, bool at_end = false);

 private:
  enum class State { before, reasoning, content };
  State state_;
  std::string held_;         // text not yet read
  bool reasoning_started_ = false;  // some reasoning text went out (newlines at its start are trimmed before)
  bool content_started_ = false;    // some content went out
};

}  // namespace actord
