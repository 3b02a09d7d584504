// A response format's text (a JSON schema, a regex, a GBNF grammar) compiled once for every place that needs it:
// compile_format() for the worker that matches outputs against it; compiles(), whether it compiles, for the front
// ends that refuse a request before it reaches a worker (the API, the scheduler). compiles() remembers the last
// kRemembered texts that compiled, so that clients sending the same schema with every request pay its compile once
// (a schema of every format takes a few ms). Safe to call from several threads at once.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/sampling_options.hpp"
#include "core/status.hpp"
#include "structured/grammar.hpp"
#include "structured/json_schema.hpp"
#include "structured/output_matcher.hpp"
#include "structured/regex.hpp"

namespace actord::structured {

inline constexpr size_t kRemembered = 64;

// What a json_schema, regex or grammar format's text compiles to: exactly one of the three is set.
struct CompiledFormat {
  std::shared_ptr<const JsonSchema> schema;
  std::optional<Regex> regex;
  std::optional<Grammar> grammar;

  // A matcher at the start of an output (this must outlive it).
  OutputMatcher matcher() const;
};

// `text` compiled as a json_schema, regex or grammar format: the compiler's own message when it does not compile;
// Errc::invalid_argument for the other formats, which have no text.
Result<CompiledFormat> compile_format(ResponseFormat format, const std::string& text);

// The compile error of `text` as a json_schema, regex or grammar format (the compiler's own message), or success;
// success for the other formats.
Status compiles(ResponseFormat format, const std::string& text);

// A compile error as a request's error names it: "response_format: ", then "json_schema: " for a schema (the regex
// and grammar compilers name themselves), then the compiler's message.
std::string format_error(ResponseFormat format, const std::string& message);

}  // namespace actord::structured
