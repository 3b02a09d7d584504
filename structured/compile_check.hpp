// compiles(): whether a response format's text (a JSON schema, a regex, a GBNF grammar) compiles, for the front ends
// that refuse a request before it reaches a worker (the API, the scheduler). The last kRemembered texts that
// compiled are remembered, so that clients sending the same schema with every request pay its compile once (a
// schema of every format takes a few ms). Safe to call from several threads at once.
#pragma once

#include <string>

#include "core/status.hpp"

namespace actord::structured {

enum class TextKind : char { json_schema = 's', regex = 'r', grammar = 'g' };

inline constexpr size_t kRemembered = 64;

// The compile error (the compiler's own message), or success.
Status compiles(TextKind kind, const std::string& text);

}  // namespace actord::structured
