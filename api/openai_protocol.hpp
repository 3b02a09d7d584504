// The OpenAI API's request bodies as actord requests: /v1/completions and /v1/chat/completions.
//
// Contract: parse_*() read a JSON body whatever it holds and never throw: a malformed body, a field of the wrong
// type, a value out of range or an unknown field each give an ApiError with status 400, the field in `param` and
// a message naming it (`temperature: must be finite and >= 0, got -1`). Numbers are range-checked as read:
// integers beyond their field's range or 64 bits, floats for integer fields and non-finite or beyond-float numbers
// (1e999 reads as inf, 1e300) are refused naming the field. Sampling values go through
// SamplingOptions::validate with the model's vocabulary. Chat messages are rendered with the model's chat
// template and encoded without adding special tokens (the template writes them), as HF's apply_chat_template;
// tools, tool_choice and parallel_tool_calls as openai_tools.hpp says (a constrained tool_choice becomes the
// request's json_schema); vLLM's guided_json, guided_regex, guided_choice, guided_grammar and structured_outputs
// {json | json_object | regex | choice | grammar}, and llama-server's json_schema and grammar, constrain the text as
// a response_format json_schema, json_object, regex (structured/regex.hpp) or grammar (GBNF, structured/grammar.hpp)
// (guided_decoding_backend is read and ignored); chat_template_kwargs (vLLM's: more template variables, such as Qwen3's enable_thinking)
// go to the template; a reasoning model's replies are split as openai_reasoning.hpp says.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "api/openai_tools.hpp"
#include "tokenizer/chat_template.hpp"

namespace actord {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;                          // the field at fault, when there is one
  std::string type = "invalid_request_error";
};

std::string error_body(const ApiError& error);  // OpenAI's {"error": {message, type, param, code}}

struct ApiRequest {
  bool chat = false;
  std::string model;                       // as the client named it ("" when it did not)
  std::vector<GenerateRequest> prompts;    // one per prompt (completions accept several); n samples each
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
  bool echo = false;                       // completions: the prompt's text before the completion
  int logprobs = -1;                       // -1: none; else the top alternatives per token (chat: top_logprobs)
  ToolUse tools;                           // chat: tools, tool_choice, parallel_tool_calls (openai_tools.hpp)
  bool reasoning = false;                  // chat: the reply is split into reasoning_content and content
  bool reasoning_open = false;             // ... and its prompt opened the <think> block (openai_reasoning.hpp)
};

struct ParseContext {
  int vocab_size = 0;
  const Tokenizer* tokenizer = nullptr;    // for chat: encodes the rendered conversation
  const ChatTemplate* chat_template = nullptr;  // null: the model has none (chat requests are refused)
  const nlohmann::json* special_tokens = nullptr;  // bos_token, eos_token, ... for the template
  std::optional<ToolCallFormat> tool_format;      // how the model writes tool calls (none: requests with tools
                                                  // and tool_choice auto are refused)
  bool reasoning = false;                         // replies are split at </think> (openai_reasoning.hpp)
};

// Bodies nested deeper than this (arrays and objects) are refused with a 400 while they are parsed.
constexpr int kMaxBodyDepth = 64;

std::variant<ApiRequest, ApiError> parse_request(const std::string& body, bool chat, const ParseContext& context);

}  // namespace actord
