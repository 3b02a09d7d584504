#include "structured/compile_check.hpp"

#include <mutex>
#include <unordered_set>

namespace actord::structured {

OutputMatcher CompiledFormat::matcher() const {
  if (schema) return OutputMatcher(JsonMatcher(*schema));
  if (regex) return OutputMatcher(RegexMatcher(*regex));
  return OutputMatcher(GrammarMatcher(*grammar));
}

Result<CompiledFormat> compile_format(ResponseFormat format, const std::string& text) {
  CompiledFormat compiled;
  switch (format) {
    case ResponseFormat::json_schema: {
      auto s = JsonSchema::compile(text);
      if (!s) return s.error();
      compiled.schema = std::move(*s);
      return compiled;
    }
    case ResponseFormat::regex: {
      auto r = Regex::compile(text);
      if (!r) return r.error();
      compiled.regex = std::move(*r);
      return compiled;
    }
    case ResponseFormat::grammar: {
      auto g = Grammar::compile(text);
      if (!g) return g.error();
      compiled.grammar = std::move(*g);
      return compiled;
    }
    default:
      return make_error(Errc::invalid_argument, "response_format: this format has no text to compile");
  }
}

Status compiles(ResponseFormat format, const std::string& text) {
  if (format != ResponseFormat::json_schema && format != ResponseFormat::regex && format != ResponseFormat::grammar)
    return Status::success();  // no text
  static std::mutex mu;
  static std::unordered_set<std::string> compiled;
  std::string key = static_cast<char>(format) + text;
  {
    std::lock_guard lock(mu);
    if (compiled.count(key)) return Status::success();
  }
  if (auto c = compile_format(format, text); !c) return c.error();
  std::lock_guard lock(mu);
  if (compiled.size() >= kRemembered) compiled.clear();
  compiled.insert(std::move(key));
  return Status::success();
}

std::string format_error(ResponseFormat format, const std::string& message) {
  return std::string("response_format: ") + (format == ResponseFormat::json_schema ? "json_schema: " : "") + message;
}

}  // namespace actord::structured
