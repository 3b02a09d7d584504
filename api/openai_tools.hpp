// Tool calling on /v1/chat/completions: a request's `tools`, `tool_choice` and `parallel_tool_calls`, what they
// make of the prompt and of the generated text's constraint, and the tool calls read back from what the model wrote.
//
// Contract:
// - read_tools() checks the fields (each error names its field) and gives the ToolUse: tool_choice "none" (the
//   default without tools), "auto" (the default with them: the model may write calls in its chat template's format,
//   read back by the ToolCallReader), "required" (the text is constrained to a JSON array of one or more
//   {"name", "parameters"} objects, a tagged union over the tools with each tool's parameters schema; at most one
//   when parallel_tool_calls is false) or {"type": "function", "function": {"name"}} (the text is constrained to
//   that tool's arguments: its parameters schema). The constrained choices compile the schemas (structured/
//   json_schema.hpp): a keyword they cannot enforce is refused naming the tool; "auto" shows the tools to the model
//   and enforces nothing.
// - Tools are rendered by the chat template (HF's `tools` variable, the tool objects as sent); a template that does
//   not mention `tools` is refused for them. Assistant messages' tool_calls arguments, JSON text in OpenAI's API,
//   are given to the template as objects (HF templates write them with tojson), as vLLM does.
// - The format of calls in "auto" is the server's `tool_call_parser`, or where that is "auto" the one the chat
//   template writes: hermes (`<tool_call>{"name", "arguments"}</tool_call>`: Qwen2.5 / Qwen3, Hermes, most ChatML
//   templates), mistral (`[TOOL_CALLS][{"name", "arguments"}, ...]`) or llama3_json (`{"name", "parameters"}`,
//   several separated by ';', after an optional `<|python_tag|>`). Special tokens are not in the detokenized text,
//   so the mistral and llama3_json readers also take their JSON without its marker at the text's start.
// - ToolCallReader reads one choice's text as it streams: content that is surely not part of a call goes out at
//   once; a call goes out whole once it has ended; text that looked like a call but does not parse as one goes out
//   as content at the end. Arguments are compact JSON text, but for a named choice's call: its arguments are the
//   text as the model writes it (as vLLM gives them), streamed as they come (the call goes out with its first
//   piece, then Delta::arguments adds to it).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.hpp"
#include "tokenizer/chat_template.hpp"

namespace actord {

enum class ToolCallFormat : uint8_t { hermes, mistral, llama3_json };

// The server's tool_call_parser setting ("auto", "hermes", "mistral", "llama3_json") with the model's chat template:
// the format, or none when "auto" finds no tool calls in the template (then requests with tools are refused).
Result<std::optional<ToolCallFormat>> tool_call_format(std::string_view setting, const ChatTemplate* chat_template);
bool renders_tools(const ChatTemplate& chat_template);

struct ToolUse {
  enum class Choice : uint8_t { none, automatic, required, named };
  Choice choice = Choice::none;
  std::string function;               // named: the tool
  bool parallel = true;               // parallel_tool_calls
  ToolCallFormat format = ToolCallFormat::hermes;
  bool constrained() const { return choice == Choice::required || choice == Choice::named; }
};

struct ToolsRequest {
  ToolUse use;
  nlohmann::ordered_json tools;       // for the chat template (null: none)
  std::string schema;                 // required / named: the JSON schema the text is constrained to
};

struct ToolsError {
  std::string param, message;
};

// Reads tools, tool_choice and parallel_tool_calls of a chat body. `format` is the server's (none: the template
// writes no tool calls); `template_renders_tools` whether the chat template mentions them.
std::variant<ToolsRequest, ToolsError> read_tools(const nlohmann::ordered_json& body,
                                                  std::optional<ToolCallFormat> format, bool template_renders_tools);

// The messages as the chat template gets them: assistant tool_calls' arguments text parsed into objects (text that
// is not a JSON object stays as it is).
nlohmann::ordered_json messages_for_template(const nlohmann::ordered_json& messages);

struct ToolCall {
  std::string id;         // call_ + 24 hex digits
  std::string name;
  std::string arguments;  // JSON text
};

class ToolCallReader {
 public:
  explicit ToolCallReader(const ToolUse& use);

  struct Delta {
    std::string content;
    std::vector<ToolCall> calls;  // calls that went out with this piece
    std::string arguments;        // named choice: more of its call's arguments (the call went out before)
  };
  // The next piece of the choice's text; with at_end, its last (what was held back comes out too).
  Delta push(std::string_view text, bool at_end = false);

 private:
  void read_calls(Delta& out, bool at_end);
  std::optional<std::vector<ToolCall>> parse_calls(std::string_view json_text) const;

  ToolUse use_;
  std::string held_;         // text not yet read as content or calls
  std::string unsent_;       // whitespace at the end of the content so far, not yet given out
  std::string after_calls_;  // content after the first call, given out at the end when not blank
  bool in_calls_ = false;    // hermes: inside <tool_call>; mistral / llama3_json: the rest is calls
  bool at_start_ = true;     // nothing but whitespace given out or held so far
  size_t calls_read_ = 0;
};

}  // namespace actord
