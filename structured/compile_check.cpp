#include "structured/compile_check.hpp"

#include <mutex>
#include <unordered_set>

#include "structured/grammar.hpp"
#include "structured/json_schema.hpp"
#include "structured/regex.hpp"

namespace actord::structured {

Status compiles(ResponseFormat format, const std::string& text) {
  static std::mutex mu;
  static std::unordered_set<std::string> compiled;
  std::string key = static_cast<char>(format) + text;
  {
    std::lock_guard lock(mu);
    if (compiled.count(key)) return Status::success();
  }
  Status status = Status::success();
  switch (format) {
    case ResponseFormat::json_schema:
      if (auto s = JsonSchema::compile(text); !s) status = s.error();
      break;
    case ResponseFormat::regex:
      if (auto r = Regex::compile(text); !r) status = r.error();
      break;
    case ResponseFormat::grammar:
      if (auto g = Grammar::compile(text); !g) status = g.error();
      break;
    default:
      return status;  // no text
  }
  if (!status) return status;
  std::lock_guard lock(mu);
  if (compiled.size() >= kRemembered) compiled.clear();
  compiled.insert(std::move(key));
  return status;
}

}  // namespace actord::structured
