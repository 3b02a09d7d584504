// compiles(): whether a response format's text (a JSON schema, a regex, a GBNF grammar) compiles, for the front ends
// that refuse a request before it reaches a worker (the API, the scheduler). The last kRemembered texts that
// compiled are remembered, so that clients sending the same schema with every request pay its compile once (a
// schema of every format takes a few ms). Safe to call from several threads at once.
#pragma once

#include <string>

#include "core/sampling_options.hpp"
#include "core/status.hpp"

namespace actord::structured {

inline constexpr size_t kRemembered = 64;

// The compile error of `text` as a json_schema, regex or grammar format (the compiler's own message), or success;
// success for the other formats, which have no text.
Status compiles(ResponseFormat format, const std::string& text);

}  // namespace actord::structured
