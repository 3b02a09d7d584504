// actord::ChatTemplate: renders HF chat templates (`chat_template` in tokenizer_config.json) for the Jinja
// subset that real templates use, with the semantics HF transformers gives them (jinja2 3.x in an
// ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, the
// loopcontrols extension, tojson = json.dumps(ensure_ascii=False), raise_exception and strftime_now).
//
// Contract:
// - `parse` tokenizes and parses once. Syntax errors are Errc::parse_error and unsupported constructs (unknown
//   filter, test, method or function; include / extends / call blocks / recursive loops ...) are
//   Errc::unsupported; both messages read "chat_template line N: ...".
// - `render` evaluates with `context` as the template's variables (messages, add_generation_prompt, bos_token,
//   eos_token, tools, ...). raise_exception('msg') in the template is Errc::invalid_argument with exactly
//   'msg' as the message; other runtime failures (type errors, using an undefined value in arithmetic, a method
//   call on an undefined value, as jinja2 does) are Errc::invalid_argument with the line. Undefined variables
//   print as "" and are falsy. Neither function throws or aborts (internal errors are values too).
// - Dict key order matters for `tojson` and `items()`: nlohmann::json sorts object keys, so pass an
//   nlohmann::ordered_json context when the insertion order of the request must be kept.
// - A ChatTemplate is immutable after parse; copies share the syntax tree and `render` is safe to call from
//   several threads at once.
// Supported: {{ }}, {% %}, {# #}, `-` / `+` whitespace control, {% raw %}; statements for (tuple targets,
// `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/cycle, break,
// continue), if/elif/else, set (names, tuples, `ns.attr`, block set), macro (defaults, keyword arguments),
// generation (rendered as its body); literals (strings with Python escapes, ints, floats, booleans, none, lists,
// tuples, dicts), attribute / subscript / slice access, + - * / // % ** ~, comparisons (chained), and/or/not,
// in/not in, `is [not]` tests (defined, undefined, none, string, mapping, iterable, sequence, number, integer,
// float, boolean, true, false, callable, even, odd, divisibleby, equalto/eq/==, ne, lt, gt, le, ge, in, sameas,
// lower, upper), ternaries; filters abs, capitalize, count, default/d, dictsort, first, float, indent, int, items,
// join, last, length, list, lower, map (attribute= or a filter name), max, min, reject, rejectattr, replace,
// reverse, round, safe, select, selectattr, sort, string, sum, title, tojson (indent), trim, unique, upper,
// wordcount; str methods strip/lstrip/rstrip, startswith/endswith, split/rsplit, upper/lower/title/capitalize,
// replace, join, find/rfind/count/index, splitlines, is*; dict get/items/keys/values; list index/count;
// globals range, namespace, dict, raise_exception, strftime_now (local time; templates such as Llama 3.1's use
// a `date_string` from the context when given). Strings are UTF-8, indexed by code point as in Python.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.hpp"

namespace actord {

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string_view source);

  Result<std::string> render(const nlohmann::json& context) const;
  Result<std::string> render(const nlohmann::ordered_json& context) const;

  const std::string& source() const;

  struct Impl;

 private:
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Loads the chat template of a HF model folder: `chat_template` of <model_dir>/tokenizer_config.json (a string,
// or the list-of-{name, template} form, where "default" is used), else <model_dir>/chat_template.jinja, else
// the `chat_template` of <model_dir>/chat_template.json. Errc::not_found when the model has none (or no
// "default" in the list form), Errc::parse_error for malformed JSON, plus parse()'s errors. When
// `special_tokens_out` is given it receives an object with the bos_token / eos_token / unk_token / pad_token
// strings that tokenizer_config.json defines (plain strings or AddedToken objects), ready to merge into the
// render context.
Result<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir,
                                        nlohmann::json* special_tokens_out = nullptr);

}  // namespace actord
