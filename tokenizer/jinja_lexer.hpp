// Internal to the chat template engine: the lexer. It applies jinja2's whitespace handling as HF transformers
// configures it (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, newlines normalized to \n,
// `-` / `+` modifiers on tags) and emits text runs and the tokens inside {{ }} / {% %} tags ({# #} comments and
// {% raw %} blocks are resolved here). Throws TemplateError (parse_error) with the line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actord::jinja {

enum class T { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  T type = T::eof;
  std::string s;
  int line = 0;
  int64_t i = 0;
  double f = 0;
};

std::vector<Token> lex_template(std::string_view source);

}  // namespace actord::jinja
