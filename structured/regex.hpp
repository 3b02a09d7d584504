// Regex: a regular expression that a sequence's whole generated text must match (vLLM's guided_regex, and its
// guided_choice as the alternation of the choices, regex_of_choices), compiled once into a DFA over bytes; and
// RegexMatcher, its state as the text grows, fed a byte at a time as JsonMatcher is.
//
// Syntax (Python's re, as vLLM's backends read it, on whole matches: ^ at the start and $ at the end are allowed and
// change nothing): literals (UTF-8), `.` (any character but a newline), classes `[...]` with ranges, negation and
// escapes, `\d \D \w \W \s \S` (ASCII: [0-9], [A-Za-z0-9_], [ \t\n\r\f\v], as Python's re.ASCII), escapes `\n \t
// \r \f \v \0 \xHH \uHHHH \UHHHHHHHH` and `\` before any punctuation, groups `( )`, `(?: )` and named `(?P<n> )` /
// `(?<n> )`, alternation `|`, quantifiers `* + ? {n} {n,} {,m} {n,m}` (lazy ones, `*?` ..., match the same texts).
// Refused, naming what and the byte offset where: backreferences, lookaround, word boundaries, inline flags,
// possessive quantifiers, unbalanced brackets, quantifiers of nothing, ranges out of order, patterns whose
// automaton would pass kMaxNfaStates / kMaxDfaStates states or kMaxWork steps to build (`(a{1000}){1000}`), and
// patterns no text matches.
//
// Contract: the DFA keeps only states from which a match can still be reached, so a matcher never takes a byte
// that leads to a text no continuation could complete (as JsonMatcher). Characters are UTF-8: `.` and negated
// classes take any valid encoding of a code point but the surrogates, never a stray byte. A Regex is immutable
// once compiled and may be read from any thread; a RegexMatcher is an int and a pointer (cheap to copy).
#pragma once

#include <algorithm>
#include <array>
#include <bitset>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "structured/code_points.hpp"

namespace actord::structured {

class Regex {
 public:
  static constexpr size_t kMaxPatternBytes = 65536;
  static constexpr int kMaxNfaStates = 200000;
  static constexpr int kMaxDfaStates = 20000;
  static constexpr int64_t kMaxWork = 50'000'000;  // NFA edges looked at while building the DFA (~0.1-0.3 s)
  static constexpr int32_t kDead = -1;

  // `never`: bytes the automaton takes nowhere, as if the pattern's classes lacked them (states that only they led on
  // from are pruned like other dead ends): JSON strings use it for the control bytes they cannot escape briefly.
  static Result<Regex> compile(std::string_view pattern, const std::bitset<256>& never = {});

  // The texts this regex matches that have min_chars to max_chars characters (UINT32_MAX: no maximum); JSON Schema's
  // minLength / maxLength beside a pattern. The minimum is in the states (a DFA of (state, count) pairs up to
  // min_chars, past kMaxDfaStates refused); the maximum is next_within's: a matcher keeps its count of characters.
  Result<Regex> with_length(uint32_t min_chars, uint32_t max_chars) const;
  uint32_t max_chars() const { return max_chars_; }
  // Under a maximum: the most characters any live state still needs to reach a match.
  uint32_t max_to_accept() const { return max_to_accept_; }
  // RegexMatcher::room for a matcher that has taken `chars` characters.
  uint32_t room(uint32_t chars, uint32_t token_chars) const {
    if (max_chars_ == UINT32_MAX) return 0;
    return static_cast<uint32_t>(std::min<uint64_t>(max_chars_ - chars, uint64_t{token_chars} + max_to_accept_));
  }
  // next() for a matcher that counts the characters taken (`chars`, updated when b is taken): under a maximum, kDead
  // also where b would leave no match within it (the fewest characters from the next state to a match, counted).
  int32_t next_within(int32_t state, uint32_t& chars, uint8_t b) const {
    const int32_t t = next(state, b);
    if (t == kDead || max_chars_ == UINT32_MAX) return t;
    const uint32_t c = chars + (utf8_continuation(b) ? 0 : 1);
    if (uint64_t{c} + to_accept_[static_cast<size_t>(t)] > max_chars_) return kDead;
    chars = c;
    return t;
  }

  int32_t start() const { return 0; }
  // The state after `b` from `state`, or kDead.
  int32_t next(int32_t state, uint8_t b) const {
    return table_[static_cast<size_t>(state) * classes_ + class_of_[b]];
  }
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // Whether some byte continues the text from `state` (false: only the end may come).
  bool continues(int32_t state) const { return continues_[static_cast<size_t>(state)] != 0; }
  int states() const { return static_cast<int>(accepting_.size()); }

 private:
  std::array<uint8_t, 256> class_of_{};  // bytes that every transition treats alike share a class
  size_t classes_ = 1;
  std::vector<int32_t> table_;           // [state * classes_ + class]
  std::vector<uint8_t> accepting_, continues_;
  uint32_t max_chars_ = UINT32_MAX;  // with_length's maximum
  std::vector<uint32_t> to_accept_;  // under a maximum: each state's fewest characters to a match
  uint32_t max_to_accept_ = 0;
  friend class RegexBuilder;
};

// The pattern that matches exactly one of `choices`, each taken literally (vLLM's guided_choice).
std::string regex_of_choices(std::span<const std::string> choices);

class RegexMatcher {
 public:
  explicit RegexMatcher(const Regex& re) : re_(&re), state_(re.start()) {}
  // false, and nothing changes, when b cannot continue a text that matches (within the regex's maximum length).
  bool feed(uint8_t b) {
    const int32_t n = re_->next_within(state_, chars_, b);
    if (n == Regex::kDead) return false;
    state_ = n;
    return true;
  }
  bool complete() const { return re_->accepting(state_); }
  bool continues() const { return re_->continues(state_); }
  int32_t state() const { return state_; }
  // Under a maximum length, the characters left below it, capped at `token_chars` (the longest text to be tried
  // from here, in characters) + max_to_accept(): from that much room on, no such text meets the maximum, so all
  // larger rooms allow the same texts. 0 without a maximum. With state(), what a mask over texts of at most
  // `token_chars` characters depends on.
  uint32_t room(uint32_t token_chars) const { return re_->room(chars_, token_chars); }
  const Regex& regex() const { return *re_; }

 private:
  const Regex* re_;
  int32_t state_;
  uint32_t chars_ = 0;  // characters taken (counted only under a maximum length)
};

}  // namespace actord::structured
