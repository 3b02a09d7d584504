#include "structured/grammar.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "structured/code_points.hpp"
#include "structured/quantifier.hpp"

namespace actord::structured {

namespace {

using Range = Grammar::Range;
using Elem = Grammar::Elem;
using Kind = Grammar::Kind;

struct Failure {
  std::string what;
};

}  // namespace

class GrammarBuilder {
 public:
  using Seq = std::vector<Elem>;

  static Result<Grammar> build(std::string_view text) {
    if (text.size() > Grammar::kMaxGrammarBytes)
      return make_error(Errc::invalid_argument,
                        "grammar: more than " + std::to_string(Grammar::kMaxGrammarBytes) + " bytes");
    GrammarBuilder b(text);
    try {
      b.parse();
      return b.finish();
    } catch (const Failure& f) {
      return make_error(Errc::invalid_argument, "grammar: " + f.what);
    }
  }

 private:
  explicit GrammarBuilder(std::string_view p) : p_(p) {}

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1 + static_cast<size_t>(std::count(p_.begin(), p_.begin() + static_cast<long>(std::min(i_, p_.size())), '\n'));
    throw Failure{what + " (line " + std::to_string(line) + ")"};
  }
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }
  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

  void space() {  // spaces, newlines and comments
    while (more()) {
      if (peek() == '#') {
        while (more() && peek() != '\n') ++i_;
      } else if (std::isspace(static_cast<unsigned char>(peek()))) {
        ++i_;
      } else {
        break;
      }
    }
  }

  // A rule name at i_ followed by ::= (a new rule begins).
  bool at_definition() const {
    size_t j = i_;
    while (j < p_.size() && name_char(p_[j])) ++j;
    if (j == i_) return false;
    while (j < p_.size() && (p_[j] == ' ' || p_[j] == '\t')) ++j;
    return p_.substr(j, 3) == "::=";
  }

  std::string name() {
    const size_t from = i_;
    while (more() && name_char(peek())) ++i_;
    if (i_ == from) fail(std::string("expected a rule name, got '") + (more() ? std::string(1, peek()) : "the end") + "'");
    return std::string(p_.substr(from, i_ - from));
  }

  int32_t rule_id(const std::string& n) {
    auto [it, added] = ids_.emplace(n, static_cast<int32_t>(rules_.size()));
    if (added) {
      rules_.emplace_back();
      names_.push_back(n);
      defined_.push_back(false);
    }
    return it->second;
  }

  int32_t new_rule(std::vector<Seq> alts, const std::string& from) {
    const auto id = static_cast<int32_t>(rules_.size());
    rules_.push_back(std::move(alts));
    names_.push_back(from + "#" + std::to_string(id));
    defined_.push_back(true);
    return id;
  }

  void count(size_t n) {
    elements_ += n;
    if (elements_ > static_cast<size_t>(Grammar::kMaxElements))
      fail("more than " + std::to_string(Grammar::kMaxElements) + " elements once repetitions are expanded");
  }

  Elem chars(std::vector<Range> s) {
    s = normalized(std::move(s));
    if (s.empty()) fail("a character class that matches nothing");
    sets_.push_back(std::move(s));
    count(1);
    return {Kind::chars, static_cast<int32_t>(sets_.size()) - 1};
  }

  void parse() {
    space();
    while (more()) {
      const std::string n = name();
      while (more() && (peek() == ' ' || peek() == '\t')) ++i_;
      if (p_.substr(i_, 3) != "::=") fail("expected ::= after rule name " + n);
      i_ += 3;
      const int32_t id = rule_id(n);
      if (defined_[static_cast<size_t>(id)]) fail("rule " + n + " is defined twice");
      defined_[static_cast<size_t>(id)] = true;
      current_ = n;
      rules_[static_cast<size_t>(id)] = alternatives();
      space();
      if (more() && peek() == ')') fail("unbalanced ')' in rule " + n);
    }
  }

  std::vector<Seq> alternatives() {
    std::vector<Seq> alts{sequence()};
    for (;;) {
      space();
      if (!more() || peek() != '|') break;
      ++i_;
      alts.push_back(sequence());
    }
    return alts;
  }

  Seq sequence() {
    Seq seq;
    for (;;) {
      space();
      if (!more() || peek() == '|' || peek() == ')' || at_definition()) break;
      Seq item = primary();
      postfix(item);
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  uint32_t hex(int digits) {
    const auto v = hex_at(p_, i_, digits);
    if (!v) fail("an escape needs " + std::to_string(digits) + " hex digits that name a character");
    i_ += static_cast<size_t>(digits);
    return *v;
  }

  // One character of a literal or class (after its opening), escapes read.
  uint32_t character() {
    const auto b0 = static_cast<uint8_t>(p_[i_]);
    if (b0 == '\\') {
      ++i_;
      if (!more()) fail("a grammar may not end with a backslash");
      const char c = p_[i_++];
      switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default:
          if (std::isalnum(static_cast<unsigned char>(c))) fail(std::string("unknown escape \\") + c);
          return static_cast<uint8_t>(c);
      }
    }
    const auto cp = utf8_at(p_, i_);
    if (!cp) fail("invalid UTF-8");
    i_ += static_cast<size_t>(cp->second);
    return cp->first;
  }

  Seq primary() {
    const char c = peek();
    if (c == '"') {
      ++i_;
      Seq seq;
      while (more() && peek() != '"') {
        if (peek() == '\n') fail("a string literal may not span lines");
        const uint32_t cp = character();
        seq.push_back(chars({{cp, cp}}));
      }
      if (!more()) fail("unterminated string literal");
      ++i_;
      return seq;
    }
    if (c == '[') {
      ++i_;
      const bool negated = more() && peek() == '^';
      if (negated) ++i_;
      std::vector<Range> s;
      while (more() && peek() != ']') {
        const uint32_t lo = character();
        if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
          ++i_;
          const uint32_t hi = character();
          if (hi < lo) fail("a range out of order in a character class");
          s.push_back({lo, hi});
        } else {
          s.push_back({lo, lo});
        }
      }
      if (!more()) fail("unterminated character class");
      ++i_;
      return {chars(negated ? complement(s) : s)};
    }
    if (c == '.') {
      ++i_;
      return {chars({{0, kMaxCodePoint}})};
    }
    if (c == '(') {
      ++i_;
      std::vector<Seq> alts = alternatives();
      space();
      if (!more() || peek() != ')') fail("missing ) in rule " + current_);
      ++i_;
      if (alts.size() == 1) return alts[0];
      count(1);
      return {Elem{Kind::rule, new_rule(std::move(alts), current_)}};
    }
    if (name_char(c)) {
      count(1);
      return {Elem{Kind::rule, rule_id(name())}};
    }
    fail(std::string("unexpected '") + c + "' in rule " + current_);
  }

  // Wraps `item` in each quantifier that follows it, as rules of their own.
  void postfix(Seq& item) {
    while (more()) {
      const auto q = quantifier_at(p_, i_);
      if (!q) {
        if (peek() == '{') fail("a repetition is {m}, {m,}, {,n} or {m,n}");
        return;
      }
      if (q->max >= 0 && q->max < q->min) fail("a repetition's bounds are out of order");
      if (q->min > Grammar::kMaxElements || q->max > Grammar::kMaxElements) fail("a repetition's bound is too large");
      const int min = static_cast<int>(q->min), max = static_cast<int>(q->max);
      if (item.empty()) fail("nothing to repeat in rule " + current_);
      item = repeated(item, min, max);
    }
  }

  Seq repeated(const Seq& item, int min, int max) {
    Elem x = item[0];
    if (item.size() != 1) {  // a sequence repeated: a rule of its own
      count(1);
      x = {Kind::rule, new_rule({item}, current_)};
    }
    Seq out;
    for (int k = 0; k < min; ++k) {
      count(1);
      out.push_back(x);
    }
    if (max < 0) {  // S ::= x S | (nothing)
      const auto s = new_rule({}, current_);
      count(3);
      rules_[static_cast<size_t>(s)] = {{x, Elem{Kind::rule, s}}, {}};
      out.push_back({Kind::rule, s});
    } else if (max > min) {  // O_1 ::= x | (nothing); O_k ::= x O_{k-1} | (nothing)
      int32_t inner = -1;
      for (int k = 0; k < max - min; ++k) {
        Seq alt{x};
        if (inner >= 0) alt.push_back({Kind::rule, inner});
        count(alt.size() + 1);
        inner = new_rule({alt, {}}, current_);
      }
      out.push_back({Kind::rule, inner});
    }
    return out;
  }

  Result<Grammar> finish() {
    const auto root = ids_.find("root");
    if (root == ids_.end() || !defined_[static_cast<size_t>(root->second)]) fail("no root rule (root ::= ...)");
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) fail("undefined rule " + names_[r]);
    const size_t n = rules_.size();
    // Rules that derive some text, and alternatives that cannot are dropped (a matcher never starts one).
    std::vector<uint8_t> productive(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (productive[r]) continue;
        for (const Seq& alt : rules_[r]) {
          if (std::all_of(alt.begin(), alt.end(), [&](const Elem& e) {
                return e.kind == Kind::chars || productive[static_cast<size_t>(e.value)];
              })) {
            productive[r] = changed = true;
            break;
          }
        }
      }
    }
    if (!productive[static_cast<size_t>(root->second)]) fail("no text is a sentence of the grammar");
    for (auto& alts : rules_) {
      alts.erase(std::remove_if(alts.begin(), alts.end(), [&](const Seq& alt) {
                   return std::any_of(alt.begin(), alt.end(), [&](const Elem& e) {
                     return e.kind == Kind::rule && !productive[static_cast<size_t>(e.value)];
                   });
                 }),
                 alts.end());
    }
    // Left recursion: a rule reaching itself through the first elements of its alternatives (nullable ones skipped).
    std::vector<uint8_t> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& alt : rules_[r]) {
          if (std::all_of(alt.begin(), alt.end(), [&](const Elem& e) {
                return e.kind == Kind::rule && nullable[static_cast<size_t>(e.value)];
              })) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& alt : rules_[r]) {
        for (const Elem& e : alt) {
          if (e.kind == Kind::chars) break;
          left[r].push_back(e.value);
          if (!nullable[static_cast<size_t>(e.value)]) break;
        }
      }
    }
    std::vector<uint8_t> color(n, 0);  // 0 unseen, 1 on the path, 2 done
    for (size_t r = 0; r < n; ++r) {
      if (color[r]) continue;
      std::vector<std::pair<int32_t, size_t>> path{{static_cast<int32_t>(r), 0}};
      color[r] = 1;
      while (!path.empty()) {
        auto& [rule, next] = path.back();
        const auto& edges = left[static_cast<size_t>(rule)];
        if (next == edges.size()) {
          color[static_cast<size_t>(rule)] = 2;
          path.pop_back();
          continue;
        }
        const int32_t to = edges[next++];
        if (color[static_cast<size_t>(to)] == 1) {
          std::string name = names_[static_cast<size_t>(to)];
          fail("left recursion through rule " + name.substr(0, name.find('#')));
        }
        if (color[static_cast<size_t>(to)] == 0) {
          color[static_cast<size_t>(to)] = 1;
          path.push_back({to, 0});
        }
      }
    }
    Grammar g;
    g.sets_ = std::move(sets_);
    g.root_ = root->second;
    g.alts_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& alt : rules_[r]) {
        g.alts_[r].push_back(static_cast<int32_t>(g.elems_.size()));
        g.elems_.insert(g.elems_.end(), alt.begin(), alt.end());
        g.elems_.push_back({Kind::end, 0});
      }
    }
    return g;
  }

  std::string_view p_;
  size_t i_ = 0;
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> names_;
  std::vector<uint8_t> defined_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<std::vector<Range>> sets_;
  std::string current_;
  size_t elements_ = 0;
};

Result<Grammar> Grammar::compile(std::string_view text) { return GrammarBuilder::build(text); }

GrammarMatcher::GrammarMatcher(const Grammar& g) : g_(&g) {
  for (const int32_t alt : g.alternatives(g.root())) {
    buffers_.scratch.assign(1, alt);
    expand(buffers_.scratch, stacks_);
  }
  sort_unique(stacks_, buffers_);
}

void GrammarMatcher::expand(std::vector<int32_t>& s, Stacks& out) const {
  const auto& elems = g_->elems();
  if (out.data.size() > Grammar::kMaxStackData || out.size() > Grammar::kMaxStackData) return;  // step() refuses
  if (s.empty()) return out.add(s);
  const int32_t pos = s.back();
  const Grammar::Elem& e = elems[static_cast<size_t>(pos)];
  if (e.kind == Grammar::Kind::end) {  // the innermost rule has ended: its caller goes on
    s.pop_back();
    expand(s, out);
    s.push_back(pos);
    return;
  }
  if (e.kind == Grammar::Kind::chars) return out.add(s);
  // A rule: its frame goes on after it (or closes now, when the rule was its last element), then each alternative.
  const bool last = elems[static_cast<size_t>(pos) + 1].kind == Grammar::Kind::end;
  if (last) s.pop_back();
  else s.back() = pos + 1;
  for (const int32_t alt : g_->alternatives(e.value)) {
    s.push_back(alt);
    expand(s, out);
    s.pop_back();
  }
  if (last) s.push_back(pos);
  else s.back() = pos;
}

bool GrammarMatcher::accept(uint32_t cp) {
  Stacks next;
  if (!step(cp, next, buffers_)) return false;
  std::swap(stacks_, next);
  return true;
}

bool GrammarMatcher::feed_into(uint8_t b, GrammarMatcher& out) const {
  if (partial_left_ == 0 && b < 0x80) {
    out.g_ = g_;
    out.partial_left_ = 0;
    return step(b, out.stacks_, out.buffers_);
  }
  out.g_ = g_;
  out.stacks_.data = stacks_.data;
  out.stacks_.ends = stacks_.ends;
  out.partial_ = partial_, out.partial_left_ = partial_left_;
  out.next_lo_ = next_lo_, out.next_hi_ = next_hi_;
  return out.feed(b);
}

bool GrammarMatcher::step(uint32_t cp, Stacks& next, Buffers& buffers) const {
  std::vector<int32_t>& scratch = buffers.scratch;
  const auto& elems = g_->elems();
  next.clear();
  for (size_t k = 0; k < stacks_.size(); ++k) {
    const size_t from = stacks_.begin_of(k), to = stacks_.ends[k];
    if (from == to) continue;
    const int32_t pos = stacks_.data[to - 1];
    if (!contains(g_->set(elems[static_cast<size_t>(pos)].value), cp)) continue;
    scratch.assign(stacks_.data.begin() + static_cast<long>(from), stacks_.data.begin() + static_cast<long>(to));
    scratch.back() = pos + 1;
    expand(scratch, next);
    if (next.data.size() > Grammar::kMaxStackData || next.size() > Grammar::kMaxStackData) return false;
  }
  if (next.size() == 0) return false;
  sort_unique(next, buffers);
  return next.size() <= Grammar::kMaxStacks;  // too ambiguous to follow: the character is refused
}

void GrammarMatcher::sort_unique(Stacks& s, Buffers& buffers) {
  if (s.size() < 2) return;
  auto span_of = [&](uint32_t k) {
    const int32_t* p = s.data.data();
    return std::pair{p + s.begin_of(k), p + s.ends[k]};
  };
  auto less = [&](uint32_t a, uint32_t b) {
    auto [a0, a1] = span_of(a);
    auto [b0, b1] = span_of(b);
    return std::lexicographical_compare(a0, a1, b0, b1);
  };
  auto equal = [&](uint32_t a, uint32_t b) {
    auto [a0, a1] = span_of(a);
    auto [b0, b1] = span_of(b);
    return std::equal(a0, a1, b0, b1);
  };
  std::vector<uint32_t>& order = buffers.order;
  order.resize(s.size());
  for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), less);
  order.erase(std::unique(order.begin(), order.end(), equal), order.end());
  Stacks& spare = buffers.spare;
  spare.clear();
  for (const uint32_t k : order) {
    auto [p0, p1] = span_of(k);
    spare.data.insert(spare.data.end(), p0, p1);
    spare.ends.push_back(static_cast<uint32_t>(spare.data.size()));
  }
  std::swap(s, spare);
}

bool GrammarMatcher::may_take(uint32_t lo, uint32_t hi) const {
  const auto& elems = g_->elems();
  for (size_t k = 0; k < stacks_.size(); ++k) {
    const size_t from = stacks_.begin_of(k), to = stacks_.ends[k];
    if (from != to && intersects(g_->set(elems[static_cast<size_t>(stacks_.data[to - 1])].value), lo, hi)) return true;
  }
  return false;
}

bool GrammarMatcher::feed(uint8_t b) {
  if (partial_left_ == 0) {
    if (b < 0x80) return accept(b);
    uint8_t len = 0, lo = 0x80, hi = 0xBF;
    uint32_t bits = 0;
    if (b >= 0xC2 && b <= 0xDF) len = 2, bits = b & 0x1Fu;
    else if (b >= 0xE0 && b <= 0xEF) len = 3, bits = b & 0x0Fu, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) len = 4, bits = b & 0x07u, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else return false;
    const int rest = 6 * (len - 2);  // bits after the next continuation byte
    const uint32_t first = ((bits << 6) | (lo & 0x3Fu)) << rest;
    const uint32_t last = (((bits << 6) | (hi & 0x3Fu)) << rest) | ((1u << rest) - 1);
    if (!may_take(first, last)) return false;
    partial_ = bits, partial_left_ = static_cast<uint8_t>(len - 1), next_lo_ = lo, next_hi_ = hi;
    return true;
  }
  if (b < next_lo_ || b > next_hi_) return false;
  const uint32_t bits = (partial_ << 6) | (b & 0x3Fu);
  const int left = partial_left_ - 1;
  if (left == 0) {
    if (!accept(bits)) return false;
    partial_left_ = 0;
    return true;
  }
  const int rest = 6 * left;
  if (!may_take(bits << rest, (bits << rest) | ((1u << rest) - 1))) return false;
  partial_ = bits, partial_left_ = static_cast<uint8_t>(left), next_lo_ = 0x80, next_hi_ = 0xBF;
  return true;
}

bool GrammarMatcher::complete() const {
  return partial_left_ == 0 && stacks_.size() > 0 && stacks_.ends[0] == 0;  // sorted: an empty stack comes first
}

std::string GrammarMatcher::key() const {
  std::string k;
  auto put = [&](uint32_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
  if (partial_left_ == 0) {
    put(0xFFFFFFFFu);
  } else {
    put(partial_);
    put(static_cast<uint32_t>(partial_left_) << 16 | static_cast<uint32_t>(next_lo_) << 8 | next_hi_);
  }
  for (size_t s = 0; s < stacks_.size(); ++s) {
    put(static_cast<uint32_t>(stacks_.ends[s] - stacks_.begin_of(s)));
    for (size_t i = stacks_.begin_of(s); i < stacks_.ends[s]; ++i) put(static_cast<uint32_t>(stacks_.data[i]));
  }
  return k;
}

}  // namespace actord::structured
