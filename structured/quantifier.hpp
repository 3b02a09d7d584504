// A quantifier as the regex and GBNF parsers read it alike (regex.hpp, grammar.hpp): `*`, `+`, `?`, `{m}`, `{m,}`,
// `{,n}`, `{m,n}` (and `{,}`, any count).
//
// Contract: pure. quantifier_at reads one at p[i] and moves i past it; where there is none (or braces that are not
// one) it returns nothing and leaves i. Bounds are as written, numbers past 2^20 read as 2^20 (every caller's limit is
// below); max -1 is no bound. The callers check the order of the bounds and their own limits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string_view>

namespace actord::structured {

struct Quantifier {
  long min = 0, max = 0;  // max -1: no bound
};

inline std::optional<Quantifier> quantifier_at(std::string_view p, size_t& i) {
  if (i >= p.size()) return std::nullopt;
  switch (p[i]) {
    case '*': return ++i, Quantifier{0, -1};
    case '+': return ++i, Quantifier{1, -1};
    case '?': return ++i, Quantifier{0, 1};
    case '{': break;
    default: return std::nullopt;
  }
  size_t j = i + 1;
  auto number = [&](long& v) {
    const size_t from = j;
    v = 0;
    for (; j < p.size() && p[j] >= '0' && p[j] <= '9'; ++j) v = std::min<long>(v * 10 + (p[j] - '0'), 1L << 20);
    return j > from;
  };
  Quantifier q{0, -1};
  const bool has_min = number(q.min);
  if (j < p.size() && p[j] == ',') {
    ++j;
    if (!number(q.max)) q.max = -1;
  } else {
    if (!has_min) return std::nullopt;
    q.max = q.min;
  }
  if (j >= p.size() || p[j] != '}') return std::nullopt;
  i = j + 1;
  return q;
}

}  // namespace actord::structured
