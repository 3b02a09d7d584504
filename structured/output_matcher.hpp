// OutputMatcher: the grammar a sequence's response format puts on its generated text, whichever kind it is (one
// JSON value, json_matcher.hpp; a text a regular expression matches, regex.hpp; a sentence of a GBNF grammar,
// grammar.hpp), behind one feed / complete.
//
// Contract: as each matcher's: feed(b) is false and changes nothing when b cannot continue the text; complete() is
// true where the text may end (the stop ids may come). A value (a grammar's holds its parse stacks); what it
// matches against (a schema, a regex, a grammar) must outlive it.
#pragma once

#include <cstdint>
#include <variant>

#include "structured/grammar.hpp"
#include "structured/json_matcher.hpp"
#include "structured/regex.hpp"

namespace actord::structured {

class OutputMatcher {
 public:
  explicit OutputMatcher(const JsonMatcher& m) : m_(m) {}
  explicit OutputMatcher(const RegexMatcher& m) : m_(m) {}
  explicit OutputMatcher(const GrammarMatcher& m) : m_(m) {}

  bool feed(uint8_t b) {
    return std::visit([b](auto& m) { return m.feed(b); }, m_);
  }
  bool complete() const {
    return std::visit([](const auto& m) { return m.complete(); }, m_);
  }
  const JsonMatcher* json() const { return std::get_if<JsonMatcher>(&m_); }
  const RegexMatcher* regex() const { return std::get_if<RegexMatcher>(&m_); }
  const GrammarMatcher* grammar() const { return std::get_if<GrammarMatcher>(&m_); }

 private:
  std::variant<JsonMatcher, RegexMatcher, GrammarMatcher> m_;
};

}  // namespace actord::structured
