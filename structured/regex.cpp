#include "structured/regex.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <unordered_map>
#include <utility>

#include "structured/code_points.hpp"
#include "structured/quantifier.hpp"

namespace actord::structured {

namespace {

using Range = CodeRange;
using Set = CodeSet;

const Set& digits() {
  static const Set s{{'0', '9'}};
  return s;
}
const Set& word() {
  static const Set s{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return s;
}
const Set& space() {
  static const Set s{{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and the space
  return s;
}

struct Node {
  enum class Kind : uint8_t { set, concat, alt, repeat };
  Kind kind;
  Set set;                // set
  std::vector<int> kids;  // concat, alt: in order; repeat: one
  int min = 0, max = 0;   // repeat; max -1: no bound
};

struct ParseError {
  std::string what;
  size_t at;
};

class Parser {
 public:
  Parser(std::string_view p, std::vector<Node>& nodes) : p_(p), nodes_(nodes) {}

  int parse() {
    const int root = alternation();
    if (i_ < p_.size()) fail("unbalanced ')'");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw ParseError{what, i_}; }
  [[noreturn]] void fail_at(const std::string& what, size_t at) const { throw ParseError{what, at}; }
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }
  bool eat(char c) {
    if (more() && p_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  int add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }
  int set_node(Set s) { return add(Node{Node::Kind::set, normalized(std::move(s)), {}, 0, 0}); }

  int alternation() {
    std::vector<int> kids{concat()};
    while (eat('|')) kids.push_back(concat());
    if (kids.size() == 1) return kids[0];
    return add(Node{Node::Kind::alt, {}, std::move(kids), 0, 0});
  }

  int concat() {
    std::vector<int> kids;
    while (more() && peek() != '|' && peek() != ')') {
      const int r = repeat();
      if (r >= 0) kids.push_back(r);
    }
    if (kids.size() == 1) return kids[0];
    return add(Node{Node::Kind::concat, {}, std::move(kids), 0, 0});
  }

  int repeat() {
    const size_t at = i_;
    int node = atom();
    bool quantified = false;
    // A '{' that begins no quantifier is a literal (as Python's re).
    while (const auto q = quantifier_at(p_, i_)) {
      if (q->max >= 0 && q->max < q->min) fail("the quantifier's bounds are out of order");
      constexpr long kMaxCount = 100000;
      if (q->min > kMaxCount || q->max > kMaxCount) fail("a quantifier's bound above " + std::to_string(kMaxCount));
      const int min = static_cast<int>(q->min), max = static_cast<int>(q->max);
      if (quantified) fail_at("multiple repeat", i_ - 1);
      if (node < 0) fail_at("nothing to repeat", at);
      quantified = true;
      if (eat('+')) fail_at("possessive quantifiers are not supported", i_ - 1);
      eat('?');  // lazy: the same texts match
      node = add(Node{Node::Kind::repeat, {}, {node}, min, max});
    }
    return node;
  }

  // One code point of UTF-8 at i_.
  uint32_t code_point() {
    const auto c = utf8_at(p_, i_);
    if (!c) fail("invalid UTF-8");
    i_ += static_cast<size_t>(c->second);
    return c->first;
  }

  uint32_t hex(int digits) {
    const auto v = hex_at(p_, i_, digits);
    if (!v) fail("an escape needs " + std::to_string(digits) + " hex digits that name a character");
    i_ += static_cast<size_t>(digits);
    return *v;
  }

  // After a backslash: a set (\d, ... or one character). in_class: \b is a backspace there.
  Set escape(bool in_class) {
    const size_t at = i_ - 1;
    if (!more()) fail_at("a pattern may not end with a backslash", at);
    const char c = p_[i_];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const uint32_t cp = code_point();
      return {{cp, cp}};
    }
    ++i_;
    switch (c) {
      case 'd': return digits();
      case 'D': return complement(digits());
      case 'w': return word();
      case 'W': return complement(word());
      case 's': return space();
      case 'S': return complement(space());
      case 'n': return {{'\n', '\n'}};
      case 't': return {{'\t', '\t'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case 'a': return {{'\a', '\a'}};
      case '0': return {{0, 0}};
      case 'x': { const uint32_t v = hex(2); return {{v, v}}; }
      case 'u': { const uint32_t v = hex(4); return {{v, v}}; }
      case 'U': { const uint32_t v = hex(8); return {{v, v}}; }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        fail_at("word boundaries (\\b) are not supported", at);
      default: break;
    }
    if (c >= '1' && c <= '9') fail_at("backreferences are not supported", at);
    if (std::isalnum(static_cast<unsigned char>(c)))
      fail_at(std::string("unknown escape \\") + c + " (anchors, word boundaries and Unicode classes are not supported)", at);
    return {{static_cast<uint8_t>(c), static_cast<uint8_t>(c)}};
  }

  int atom() {
    const size_t at = i_;
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (more() && (peek() == 'P' || peek() == '<') && !(p_.substr(i_, 2) == "<=" || p_.substr(i_, 2) == "<!")) {
          if (peek() == 'P') {
            ++i_;
            if (more() && peek() == '=') fail_at("backreferences are not supported", at);
          }
          if (!eat('<')) fail_at("a named group is (?P<name>...)", at);
          const size_t name = i_;
          while (more() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')) ++i_;
          if (i_ == name || !eat('>')) fail_at("a group's name is letters, digits and _ in <>", at);
        } else if (more() && (peek() == '=' || peek() == '!' || peek() == '<')) {
          fail_at("lookaround is not supported", at);
        } else {
          fail_at("inline flags and other (? groups are not supported", at);
        }
      }
      const int inner = alternation();
      if (!eat(')')) fail_at("missing ), unterminated group", at);
      return inner;
    }
    if (c == '[') return set_node(klass());
    if (c == '.') {
      ++i_;
      return set_node(complement({{'\n', '\n'}}));
    }
    if (c == '^') {
      ++i_;
      if (at != 0) fail_at("^ is only allowed at the start (the whole text matches)", at);
      return -1;
    }
    if (c == '$') {
      ++i_;
      if (i_ != p_.size()) fail_at("$ is only allowed at the end (the whole text matches)", at);
      return -1;
    }
    if (c == '*' || c == '+' || c == '?') fail_at("nothing to repeat", at);
    if (c == '\\') {
      ++i_;
      return set_node(escape(false));
    }
    const uint32_t cp = code_point();
    return set_node({{cp, cp}});
  }

  // After '[': the class up to its ']'.
  Set klass() {
    const size_t at = i_;
    ++i_;
    const bool negated = eat('^');
    Set s;
    bool first = true;
    for (;;) {
      if (!more()) fail_at("missing ], unterminated character set", at);
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      const size_t item_at = i_;
      Set lo = member();
      if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        Set hi = member();
        if (lo.size() != 1 || lo[0].lo != lo[0].hi || hi.size() != 1 || hi[0].lo != hi[0].hi)
          fail_at("a range's ends must be single characters", item_at);
        if (hi[0].lo < lo[0].lo) fail_at("a range out of order", item_at);
        s.push_back({lo[0].lo, hi[0].lo});
      } else {
        s.insert(s.end(), lo.begin(), lo.end());
      }
    }
    Set out = negated ? complement(s) : normalized(std::move(s));
    if (out.empty()) fail_at("a character set that matches nothing", at);
    return out;
  }

  Set member() {
    if (eat('\\')) return escape(true);
    const uint32_t cp = code_point();
    return {{cp, cp}};
  }

  std::string_view p_;
  size_t i_ = 0;
  std::vector<Node>& nodes_;
};

// UTF-8 encodings of the code points [lo, hi] (one length, no surrogates) as sequences of byte ranges.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (int n = 0; n < 3; ++n) {  // split where the encoded length changes
    if (lo <= kLengthEnds[n] && hi > kLengthEnds[n]) {
      utf8_sequences(lo, kLengthEnds[n], out);
      utf8_sequences(kLengthEnds[n] + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  const int len = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  // Split until every continuation position spans whole ranges: [lo, hi] agree above the bits below position i.
  for (int i = 1; i < len; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [&](uint32_t cp, uint8_t* b) {
    static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int k = len - 1; k > 0; --k, cp >>= 6) b[k] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    b[0] = static_cast<uint8_t>(kLead[len] | cp);
  };
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < len; ++k) seq.emplace_back(a[k], b[k]);
  out.push_back(std::move(seq));
}

struct TooLarge {
  std::string what;
};

class Nfa {
 public:
  struct Edge {
    uint8_t lo, hi;
    int32_t to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<int32_t> eps;
  };

  explicit Nfa(const std::vector<Node>& nodes) : nodes_(nodes) {}

  int32_t add_state() {
    if (states.size() >= static_cast<size_t>(Regex::kMaxNfaStates))
      throw TooLarge{"its automaton needs more than " + std::to_string(Regex::kMaxNfaStates) + " NFA states"};
    states.emplace_back();
    return static_cast<int32_t>(states.size()) - 1;
  }

  // Transitions from `from` to `to` that spell node n's texts (root -1: the empty text). Loops only ever go
  // through fresh states, so that n's paths do not mix with other paths leaving `from` or entering `to`.
  void build(int n, int32_t from, int32_t to) {
    if (n < 0) return eps(from, to);
    const Node& node = nodes_[static_cast<size_t>(n)];
    switch (node.kind) {
      case Node::Kind::set: {
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
        for (const Range& r : node.set) utf8_sequences(r.lo, r.hi, seqs);
        for (const auto& seq : seqs) {
          int32_t cur = from;
          for (size_t k = 0; k < seq.size(); ++k) {
            const int32_t nxt = k + 1 == seq.size() ? to : add_state();
            states[static_cast<size_t>(cur)].edges.push_back({seq[k].first, seq[k].second, nxt});
            cur = nxt;
          }
        }
        return;
      }
      case Node::Kind::concat: {
        if (node.kids.empty()) return eps(from, to);
        int32_t cur = from;
        for (size_t k = 0; k < node.kids.size(); ++k) {
          const int32_t nxt = k + 1 == node.kids.size() ? to : add_state();
          build(node.kids[k], cur, nxt);
          cur = nxt;
        }
        return;
      }
      case Node::Kind::alt:
        for (const int kid : node.kids) {
          // Each alternative between fresh ends: one that loops must not loop through a sibling's states.
          const int32_t a = add_state(), b = add_state();
          eps(from, a);
          build(kid, a, b);
          eps(b, to);
        }
        return;
      case Node::Kind::repeat: {
        const int kid = node.kids[0];
        int32_t cur = from;
        if (node.min == 0 && node.max == 0) return eps(from, to);
        for (int k = 0; k < node.min; ++k) {
          const int32_t nxt = (k + 1 == node.min && node.max == node.min) ? to : add_state();
          build(kid, cur, nxt);
          cur = nxt;
        }
        if (node.max < 0) {  // a loop through a fresh state
          const int32_t loop = add_state(), back = add_state();
          eps(cur, loop);
          build(kid, loop, back);
          eps(back, loop);
          eps(loop, to);
        } else {
          for (int k = node.min; k < node.max; ++k) {
            eps(cur, to);
            const int32_t nxt = k + 1 == node.max ? to : add_state();
            build(kid, cur, nxt);
            cur = nxt;
          }
        }
        return;
      }
    }
  }

  std::vector<State> states;

 private:
  void eps(int32_t a, int32_t b) { states[static_cast<size_t>(a)].eps.push_back(b); }
  const std::vector<Node>& nodes_;
};

}  // namespace

class RegexBuilder {
 public:
  static Result<Regex> build(std::string_view pattern, const std::bitset<256>& never) {
    auto refuse = [&](const std::string& what) {
      return make_error(Errc::invalid_argument, "regex: " + what);
    };
    if (pattern.size() > Regex::kMaxPatternBytes)
      return refuse("a pattern of more than " + std::to_string(Regex::kMaxPatternBytes) + " bytes");
    std::vector<Node> nodes;
    int root = -1;
    try {
      root = Parser(pattern, nodes).parse();
    } catch (const ParseError& e) {
      return refuse(e.what + " at offset " + std::to_string(e.at));
    }
    Nfa nfa(nodes);
    int32_t accept = 0;
    try {
      const int32_t start = nfa.add_state();
      accept = nfa.add_state();
      nfa.build(root, start, accept);
    } catch (const TooLarge& e) {
      return refuse("the pattern is too large: " + e.what);
    }
    return determinize(nfa, accept, never);
  }

 private:
  static Result<Regex> determinize(const Nfa& nfa, int32_t accept, const std::bitset<256>& never) {
    Regex re;
    // Byte classes: a new class wherever some edge's range begins or ends.
    std::array<bool, 257> cut{};
    for (const auto& s : nfa.states)
      for (const auto& e : s.edges) cut[e.lo] = cut[static_cast<size_t>(e.hi) + 1] = true;
    for (size_t b = 0; b < 256; ++b)
      if (never[b]) cut[b] = cut[b + 1] = true;  // a class of its own, which leads nowhere
    std::vector<uint8_t> representative;
    int cls = -1;
    for (int b = 0; b < 256; ++b) {
      if (b == 0 || cut[static_cast<size_t>(b)]) {
        ++cls;
        representative.push_back(static_cast<uint8_t>(b));
      }
      re.class_of_[static_cast<size_t>(b)] = static_cast<uint8_t>(cls);
    }
    re.classes_ = representative.size();

    std::vector<uint8_t> mark(nfa.states.size(), 0);
    std::vector<int32_t> work;
    auto closure = [&](std::vector<int32_t> set) {
      work = set;
      for (const int32_t s : set) mark[static_cast<size_t>(s)] = 1;
      while (!work.empty()) {
        const int32_t s = work.back();
        work.pop_back();
        for (const int32_t t : nfa.states[static_cast<size_t>(s)].eps) {
          if (!mark[static_cast<size_t>(t)]) {
            mark[static_cast<size_t>(t)] = 1;
            set.push_back(t);
            work.push_back(t);
          }
        }
      }
      for (const int32_t s : set) mark[static_cast<size_t>(s)] = 0;
      std::sort(set.begin(), set.end());
      return set;
    };
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<const std::vector<int32_t>*> sets;
    auto intern = [&](std::vector<int32_t> set) -> int32_t {
      auto [it, added] = ids.emplace(std::move(set), static_cast<int32_t>(sets.size()));
      if (added) {
        if (sets.size() >= static_cast<size_t>(Regex::kMaxDfaStates)) return -2;
        sets.push_back(&it->first);
      }
      return it->second;
    };
    intern(closure({0}));
    // A bound on the work (edges looked at), so that a pattern's compile time is bounded whatever its shape.
    int64_t steps = 0;
    for (size_t d = 0; d < sets.size(); ++d) {
      for (size_t c = 0; c < re.classes_; ++c) {
        const uint8_t b = representative[c];
        std::vector<int32_t> targets;
        for (const int32_t s : never[b] ? std::span<const int32_t>{} : std::span<const int32_t>(*sets[d])) {
          steps += 1 + static_cast<int64_t>(nfa.states[static_cast<size_t>(s)].edges.size());
          for (const auto& e : nfa.states[static_cast<size_t>(s)].edges)
            if (e.lo <= b && b <= e.hi) targets.push_back(e.to);
        }
        if (steps > Regex::kMaxWork)
          return make_error(Errc::invalid_argument, "regex: the pattern is too large: its automaton takes more than " +
                                                        std::to_string(Regex::kMaxWork) + " steps to build");
        int32_t to = Regex::kDead;
        if (!targets.empty()) {
          std::sort(targets.begin(), targets.end());
          targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
          to = intern(closure(std::move(targets)));
          if (to == -2)
            return make_error(Errc::invalid_argument, "regex: the pattern is too large: its automaton needs more than " +
                                                          std::to_string(Regex::kMaxDfaStates) + " DFA states");
        }
        re.table_.push_back(to);
      }
      re.accepting_.push_back(std::binary_search(sets[d]->begin(), sets[d]->end(), accept) ? 1 : 0);
    }
    if (Status kept = keep_live(re); !kept) return kept.error();
    return re;
  }

  // Keeps only the states from which an accepting one can be reached (transitions into the others become kDead)
  // and notes which states still continue; an Error when the start state is not among them.
  static Status keep_live(Regex& re) {
    const size_t n = re.accepting_.size();
    std::vector<std::vector<int32_t>> into(n);
    for (size_t s = 0; s < n; ++s)
      for (size_t c = 0; c < re.classes_; ++c)
        if (const int32_t t = re.table_[s * re.classes_ + c]; t >= 0) into[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
    std::vector<uint8_t> live(n, 0);
    std::vector<int32_t> queue;
    for (size_t s = 0; s < n; ++s)
      if (re.accepting_[s]) live[s] = 1, queue.push_back(static_cast<int32_t>(s));
    while (!queue.empty()) {
      const int32_t t = queue.back();
      queue.pop_back();
      for (const int32_t s : into[static_cast<size_t>(t)])
        if (!live[static_cast<size_t>(s)]) live[static_cast<size_t>(s)] = 1, queue.push_back(s);
    }
    if (!live[0]) return make_error(Errc::invalid_argument, "regex: no text matches the pattern");
    re.continues_.assign(n, 0);
    for (size_t s = 0; s < n; ++s) {
      for (size_t c = 0; c < re.classes_; ++c) {
        int32_t& t = re.table_[s * re.classes_ + c];
        if (t >= 0 && !live[static_cast<size_t>(t)]) t = Regex::kDead;
        if (t >= 0) re.continues_[s] = 1;
      }
    }
    return Status::success();
  }

 public:
  // The product of `re` with a count of the characters taken (bytes that are not UTF-8 continuation bytes), held
  // at min_chars: a state per (state, count) pair; a maximum is kept by the matcher's count against each state's
  // fewest characters to a match (to_accept_), so that it costs no states.
  static Result<Regex> with_length(const Regex& re, uint32_t min_chars, uint32_t max_chars) {
    Regex out;
    // Classes: re's, split where continuation bytes and others shared one.
    std::map<std::pair<uint8_t, bool>, uint8_t> ids;
    std::vector<uint8_t> representative;
    for (size_t b = 0; b < 256; ++b) {
      auto [it, added] =
          ids.emplace(std::pair{re.class_of_[b], utf8_continuation(static_cast<uint8_t>(b))}, static_cast<uint8_t>(ids.size()));
      if (added) representative.push_back(static_cast<uint8_t>(b));
      out.class_of_[b] = it->second;
    }
    out.classes_ = representative.size();
    std::unordered_map<uint64_t, int32_t> index;
    std::vector<std::pair<int32_t, uint32_t>> states;
    auto intern = [&](int32_t s, uint32_t k) -> int32_t {
      auto [it, added] = index.emplace(uint64_t(uint32_t(s)) << 32 | k, static_cast<int32_t>(states.size()));
      if (added) {
        if (states.size() >= static_cast<size_t>(Regex::kMaxDfaStates)) return -2;
        states.push_back({s, k});
      }
      return it->second;
    };
    intern(re.start(), 0);
    for (size_t d = 0; d < states.size(); ++d) {
      const auto [s, k] = states[d];
      for (size_t c = 0; c < out.classes_; ++c) {
        const uint8_t b = representative[c];
        const int32_t t = re.next(s, b);
        int32_t to = Regex::kDead;
        if (t != Regex::kDead) {
          to = intern(t, std::min(k + (utf8_continuation(b) ? 0u : 1u), min_chars));
          if (to == -2)
            return make_error(Errc::invalid_argument, "regex: the pattern with its minimum length needs more than " +
                                                          std::to_string(Regex::kMaxDfaStates) + " DFA states");
        }
        out.table_.push_back(to);
      }
      out.accepting_.push_back(re.accepting(s) && k >= min_chars ? 1 : 0);
    }
    if (Status kept = keep_live(out); !kept) return kept.error();
    if (max_chars == UINT32_MAX) return out;
    // Each state's fewest characters to a match: a breadth-first search back from the accepting states, a
    // continuation byte's edge costing nothing (0-1 BFS).
    const size_t n = out.accepting_.size();
    std::vector<std::vector<std::pair<int32_t, uint32_t>>> into(n);
    for (size_t s = 0; s < n; ++s)
      for (size_t c = 0; c < out.classes_; ++c)
        if (const int32_t t = out.table_[s * out.classes_ + c]; t >= 0)
          into[static_cast<size_t>(t)].push_back({static_cast<int32_t>(s), utf8_continuation(representative[c]) ? 0u : 1u});
    out.to_accept_.assign(n, UINT32_MAX);
    std::deque<int32_t> queue;
    for (size_t s = 0; s < n; ++s)
      if (out.accepting_[s]) out.to_accept_[s] = 0, queue.push_back(static_cast<int32_t>(s));
    while (!queue.empty()) {
      const int32_t t = queue.front();
      queue.pop_front();
      for (const auto& [s, cost] : into[static_cast<size_t>(t)]) {
        const uint32_t via = out.to_accept_[static_cast<size_t>(t)] + cost;
        if (via >= out.to_accept_[static_cast<size_t>(s)]) continue;
        out.to_accept_[static_cast<size_t>(s)] = via;
        if (cost == 0) queue.push_front(s);
        else queue.push_back(s);
      }
    }
    if (out.to_accept_[0] > max_chars) return make_error(Errc::invalid_argument, "regex: no text matches the pattern");
    for (const uint32_t d : out.to_accept_)
      if (d != UINT32_MAX) out.max_to_accept_ = std::max(out.max_to_accept_, d);
    out.max_chars_ = max_chars;
    return out;
  }
};

Result<Regex> Regex::compile(std::string_view pattern, const std::bitset<256>& never) {
  return RegexBuilder::build(pattern, never);
}

Result<Regex> Regex::with_length(uint32_t min_chars, uint32_t max_chars) const {
  return RegexBuilder::with_length(*this, min_chars, max_chars);
}

std::string regex_of_choices(std::span<const std::string> choices) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += '|';
    for (const char c : choices[i]) {
      const auto b = static_cast<uint8_t>(c);
      if (b >= 0x80 || std::isalnum(b) || b == '_' || b == ' ') {
        out += c;
      } else if (b < 0x20 || b == 0x7F) {
        out += "\\x";
        out += kHex[b >> 4];
        out += kHex[b & 0xF];
      } else {
        out += '\\';
        out += c;
      }
    }
  }
  return out;
}

}  // namespace actord::structured
