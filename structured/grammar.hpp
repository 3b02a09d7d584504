// Grammar: a context-free grammar in GBNF, llama.cpp's format (what llama-server's `grammar` and vLLM's
// guided_grammar take), that a sequence's whole generated text must be a sentence of; GrammarMatcher: the parse
// stacks after the text so far, fed a byte at a time as JsonMatcher and RegexMatcher are.
//
// Syntax: rules `name ::= alternatives`, the sentence is `root`'s; alternatives `a | b`; sequences of string
// literals ("..." with the escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), character classes (`[a-z_]`, `[^"\\]`,
// the same escapes), `.` (any character), rule names, groups `( )`, each followed by `* + ?` or `{m} {m,} {m,n}
// {,n}`; `#` comments; rule names of letters, digits, `-` and `_`; newlines may go anywhere between items (a new rule
// starts where a name is followed by `::=`). Refused, naming the rule and what: an undefined rule, a rule defined
// twice, no root, left recursion (as llama.cpp refuses it), a grammar no text is a sentence of, unbalanced
// brackets, and grammars past kMaxElements elements once repetitions are expanded.
//
// Contract: a matcher never takes a byte that leaves no way to go on: every stack it keeps can reach the end
// (alternatives that derive no text are dropped at compile, and a root that derives none is refused), and a byte of a
// character is taken only while some stack's next class holds a character that begins with the bytes so far.
// Characters are UTF-8 (never a stray byte or a surrogate). A character that would leave more than kMaxStacks parses
// at once, or more than kMaxStackData positions in them (counting the duplicates an ambiguous grammar makes before
// they are merged), is refused: the work per character is bounded, and past the bound the text may end up where no
// character goes on. A Grammar is immutable once compiled and may be read from any thread; a GrammarMatcher holds its
// stacks by value (copies cost their size: token masks copy it once per prefix of the trie they feed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "structured/code_points.hpp"

namespace actord::structured {

class Grammar {
 public:
  static constexpr size_t kMaxGrammarBytes = 65536;
  static constexpr int kMaxElements = 200000;
  static constexpr size_t kMaxStacks = 4096;  // a matcher's stacks at once (an ambiguous grammar's parses)
  static constexpr size_t kMaxStackData = 1 << 16;  // their positions in all, while a character is taken

  static Result<Grammar> compile(std::string_view text);

  // The flat form: each rule's alternatives are runs of elements ending in `end`; a stack is a list of positions
  // into elems (the next element of each open rule, innermost last).
  enum class Kind : uint8_t { end, chars, rule };
  struct Elem {
    Kind kind;
    int32_t value;  // chars: an index into sets; rule: a rule's index
  };
  using Range = CodeRange;
  const std::vector<Elem>& elems() const { return elems_; }
  const std::vector<Range>& set(int32_t s) const { return sets_[static_cast<size_t>(s)]; }
  const std::vector<int32_t>& alternatives(int32_t rule) const { return alts_[static_cast<size_t>(rule)]; }
  int32_t root() const { return root_; }

 private:
  std::vector<Elem> elems_;
  std::vector<std::vector<int32_t>> alts_;  // per rule: the position of each alternative's first element
  std::vector<std::vector<Range>> sets_;    // code point ranges, sorted and merged
  int32_t root_ = 0;
  friend class GrammarBuilder;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(const Grammar& g);
  // false, and nothing changes, when b cannot continue a sentence.
  bool feed(uint8_t b);
  // feed(b) on a copy that is `out` (whose buffers are reused): what a walk of a trie does at each node; `out` is
  // left in no useful state when false.
  bool feed_into(uint8_t b, GrammarMatcher& out) const;
  // The text so far is a sentence of the grammar (between characters).
  bool complete() const;
  // Whether the stacks hold more than one parse at once (a large number means an ambiguous grammar).
  size_t stacks() const { return stacks_.size(); }
  // The state as bytes (its stacks and any partial character), equal for equal states: a cache key.
  std::string key() const;

 private:
  // The parse stacks in one buffer (no allocation per stack): stack k is data[k ? ends[k - 1] : 0, ends[k]).
  struct Stacks {
    std::vector<int32_t> data;
    std::vector<uint32_t> ends;
    size_t size() const { return ends.size(); }
    size_t begin_of(size_t k) const { return k ? ends[k - 1] : 0; }
    void clear() {
      data.clear();
      ends.clear();
    }
    void add(const std::vector<int32_t>& s) {
      data.insert(data.end(), s.begin(), s.end());
      ends.push_back(static_cast<uint32_t>(data.size()));
    }
  };
  // Adds to `out` the stacks `s` leads to before its next character: rule references opened, finished rules
  // closed. `s` is as it was on return.
  void expand(std::vector<int32_t>& s, Stacks& out) const;
  bool accept(uint32_t cp);
  // What step() works in, kept between calls so that a walk of the trie allocates nothing per node.
  struct Buffers {
    Stacks spare;
    std::vector<int32_t> scratch;
    std::vector<uint32_t> order;
  };
  // The stacks after the character cp into `next` (emptied first), sorted and each once; false when none takes it.
  bool step(uint32_t cp, Stacks& next, Buffers& buffers) const;
  // Sorts `s`'s stacks and keeps each once (the order compare and key() rely on).
  static void sort_unique(Stacks& s, Buffers& buffers);
  // Whether some stack's next class holds a character in [lo, hi].
  bool may_take(uint32_t lo, uint32_t hi) const;

  const Grammar* g_;
  Stacks stacks_;  // sorted, each once; an empty stack: the root has ended
  Buffers buffers_;
  uint32_t partial_ = 0;       // a character's bits so far
  uint8_t partial_left_ = 0;   // continuation bytes still due
  uint8_t next_lo_ = 0x80, next_hi_ = 0xBF;  // the next continuation byte's range
};

}  // namespace actord::structured
