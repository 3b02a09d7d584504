// structured/grammar: GBNF grammars against the lark package as the peer (tests/reference/check_grammar.py: each
// grammar also written in Lark's syntax; random texts the matcher takes, and mutations of them, parsed by lark's
// Earley parser), grammars refused naming what and where, bytes of UTF-8 characters taken only where some
// character can follow, and token masks against a brute force over the stories260K vocabulary.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "structured/grammar.hpp"
#include "structured/output_matcher.hpp"
#include "structured/token_mask.hpp"
#include "reference_util.hpp"
#include "test_util.hpp"
#include "token_mask_util.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
using structured::Grammar;
using structured::GrammarMatcher;

namespace {

Grammar compiled(const std::string& text) {
  auto g = Grammar::compile(text);
  INFO(text << ": " << (g ? "" : g.error().message));
  REQUIRE(g);
  return std::move(*g);
}

bool sentence(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  for (const char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

std::string refusal(const std::string& text) {
  auto g = Grammar::compile(text);
  return g ? std::string("compiled") : g.error().message;
}

// A text the matcher takes whole, ended where it is complete (empty when that did not happen within `limit` bytes).
std::string random_walk(const Grammar& g, std::mt19937& rng, size_t limit) {
  GrammarMatcher m(g);
  std::string text;
  while (text.size() < limit) {
    if (m.complete() && rng() % 5 == 0) return text;
    std::vector<uint8_t> next, ascii;
    for (int b = 0; b < 256; ++b) {
      GrammarMatcher copy = m;
      if (copy.feed(static_cast<uint8_t>(b))) {
        next.push_back(static_cast<uint8_t>(b));
        if (b < 0x80) ascii.push_back(static_cast<uint8_t>(b));
      }
    }
    if (next.empty()) return m.complete() ? text : std::string();
    const uint8_t b = !ascii.empty() && rng() % 4 != 0 ? ascii[rng() % ascii.size()] : next[rng() % next.size()];
    REQUIRE(m.feed(b));
    text += static_cast<char>(b);
  }
  return m.complete() ? text : std::string();
}

const std::vector<std::string>& alphabet() {
  static const std::vector<std::string> a = {"(", ")", "1", "+", "*", "-", "x", "y", "z", "\"", "{", "}", "[", "]",
                                             ",", ":", " ", "é", "世", "a"};
  return a;
}

struct PeerCase {
  std::string gbnf, lark;
};

// Each grammar in GBNF and, written apart, in Lark's syntax.
std::vector<PeerCase> peer_cases() {
  return {
      {R"~(root ::= ("(" root ")")*)~", R"~(start: ("(" start ")")*)~"},
      {R"~(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor)~",
       R"~(start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: /[0-9]/+ | "(" expr ")" | "-" factor)~"},
      {R"(# a small JSON
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::=
  "{" ws ( string ws ":" ws value ws
    ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" [^"\\\x00-\x1f]* "\""
number ::= "-"? [0-9]+ ("." [0-9]+)?
ws     ::= [ \n]{0,2})",
       R"(start: value
value: object | array | string | number | "true" | "false" | "null"
object: "{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"
array: "[" ws (value ws ("," ws value ws)*)? "]"
string: "\"" /[^"\\\x00-\x1f]/* "\""
number: "-"? /[0-9]/+ ("." /[0-9]/+)?
ws: /[ \n]/~0..2)"},
      {R"(root ::= ("é" | [世-界] | "😀")+ [a-z]{2,3})", R"(start: ("é" | /[世-界]/ | "😀")+ /[a-z]/~2..3)"},
      {R"(root ::= a | b
a ::= "x" "y"*
b ::= "x"+ "z"?)",
       R"(start: a | b
a: "x" "y"*
b: "x"+ "z"?)"},
      {R"(root ::= "<" .{0,4} ">" [^a-c]?)", R"(start: "<" /(?s:.)/~0..4 ">" /[^a-c]/?)"},
      {R"(root ::= item{2,} | ""
item ::= [xyz] ","?)", R"(start: (item~2..60)?
item: /[xyz]/ ","?)"},
  };
}

}  // namespace

TEST_CASE("grammar: texts the matcher takes, and mutations of them, are judged alike by lark's Earley parser (the "
          "peer)",
          "[structured][grammar]") {
  std::mt19937 rng(5);
  nlohmann::json cases = nlohmann::json::array();
  size_t texts = 0, matched = 0;
  for (const PeerCase& pc : peer_cases()) {
    const Grammar g = compiled(pc.gbnf);
    nlohmann::json c{{"lark", pc.lark}, {"texts", nlohmann::json::array()}, {"matches", nlohmann::json::array()}};
    for (int i = 0; i < 40; ++i) {
      const std::string text = random_walk(g, rng, 40);
      const std::string once = test::mutated(text, rng, alphabet());
      for (const std::string& t : {text, once, test::mutated(once, rng, alphabet())}) {
        const bool m = sentence(g, t);
        c["texts"].push_back(t);
        c["matches"].push_back(m);
        ++texts;
        matched += m;
      }
    }
    cases.push_back(std::move(c));
  }
  CHECK(matched > texts / 3);
  CHECK(matched < texts);
  const test::ReferenceRun run = test::run_reference("check_grammar.py", cases);
  INFO(run.report);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.report, Catch::Contains(std::to_string(texts) + " texts, " + std::to_string(matched) +
                                         " parsed, 0 disagree"));
}

TEST_CASE("grammar: hand-written sentences - recursion, repetition bounds, UTF-8 bytes only where a character fits",
          "[structured][grammar]") {
  const Grammar parens = compiled(R"~(root ::= ("(" root ")")*)~");
  CHECK(sentence(parens, ""));
  CHECK(sentence(parens, "(()())()"));
  CHECK_FALSE(sentence(parens, "(()"));
  CHECK_FALSE(sentence(parens, "())"));
  const Grammar bounded = compiled(R"(root ::= [a-c]{2,3} "!"{,1})");
  CHECK(sentence(bounded, "ab"));
  CHECK(sentence(bounded, "abc!"));
  CHECK_FALSE(sentence(bounded, "abca"));
  CHECK_FALSE(sentence(bounded, "a!"));
  // é is C3 A9: C3 is taken where a class holds a character beginning with it, refused where none does.
  const Grammar accents = compiled(R"(root ::= [é-ê] | "x")");
  GrammarMatcher m(accents);
  CHECK_FALSE(m.feed(0xC4));  // U+0100 and up: no character here
  CHECK(m.feed(0xC3));
  const std::string before = m.key();
  CHECK_FALSE(m.feed(0xA8));  // è: below é
  CHECK(m.key() == before);   // a refused byte changes nothing
  CHECK_FALSE(m.complete());  // inside a character
  CHECK(m.feed(0xAA));        // ê
  CHECK(m.complete());
  // Rules that derive nothing are never begun: after "a" only "b" goes on.
  const Grammar dead = compiled(R"(root ::= "a" "b" | "a" loop
loop ::= "c" loop)");
  GrammarMatcher d(dead);
  REQUIRE(d.feed('a'));
  CHECK_FALSE(GrammarMatcher(d).feed('c'));
  CHECK(d.feed('b'));
  CHECK(d.complete());
}

TEST_CASE("grammar: grammars refused naming what and where", "[structured][grammar]") {
  CHECK_THAT(refusal(R"(root ::= item)"), Catch::Contains("undefined rule item"));
  CHECK_THAT(refusal("root ::= \"a\"\nroot ::= \"b\""), Catch::Contains("rule root is defined twice (line 2)"));
  CHECK_THAT(refusal(R"(start ::= "a")"), Catch::Contains("no root rule"));
  CHECK_THAT(refusal(R"(root ::= root "a" | "b")"), Catch::Contains("left recursion through rule root"));
  CHECK_THAT(refusal("root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\""), Catch::Contains("left recursion through rule x"));
  CHECK_THAT(refusal("root ::= \"a\" loop\nloop ::= \"b\" loop"), Catch::Contains("no text is a sentence"));
  CHECK_THAT(refusal(R"(root ::= ("a" | "b")"), Catch::Contains("missing )"));
  CHECK_THAT(refusal(R"(root ::= "a" ) "b")"), Catch::Contains("unbalanced ')'"));
  CHECK_THAT(refusal(R"(root ::= "abc)"), Catch::Contains("unterminated string literal"));
  CHECK_THAT(refusal(R"(root ::= [z-a])"), Catch::Contains("range out of order"));
  CHECK_THAT(refusal(R"(root ::= "\q")"), Catch::Contains("unknown escape \\q"));
  CHECK_THAT(refusal(R"(root ::= [^\x00-\U0010FFFF])"), Catch::Contains("matches nothing"));
  CHECK_THAT(refusal(R"(root ::= "a"{3,1})"), Catch::Contains("out of order"));
  CHECK_THAT(refusal(R"(root ::= "a"{150000} "b"{150000})"), Catch::Contains("elements once repetitions are expanded"));
  CHECK(refusal(R"(root ::= ("a"{1000}){1000})") == "compiled");  // a repeated rule is referred to, not copied
  CHECK_THAT(refusal(R"(root = "a")"), Catch::Contains("expected ::= after rule name root"));
  CHECK_THAT(refusal(std::string(Grammar::kMaxGrammarBytes + 1, ' ')), Catch::Contains("more than 65536 bytes"));
  CHECK(refusal("# a comment\nroot ::= \"a\" # and another\n  | \"b\"\n") == "compiled");
}

TEST_CASE("token masks under a grammar: the ids whose bytes the matcher takes whole, stop ids where it may end - "
          "equal from the cache",
          "[structured][grammar]") {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  const auto vocab = structured::TokenVocabulary::from(*tok, 512);
  const Grammar g = compiled(R"(root ::= sentence+
sentence ::= ("Lily" | "Tom") " " [a-z ]{1,20} ("." | "!") " "?)");
  const structured::MaskCache masks(vocab, std::make_shared<structured::MaskBudget>(int64_t{1} << 20));
  std::vector<uint64_t> bits, cached;
  for (const std::string prefix : {"", "Li", "Lily", "Lily had a ", "Tom ran.", "Tom ran. ", "Tom ran. Lily abc"}) {
    INFO(prefix);
    GrammarMatcher m(g);
    for (const char c : prefix) REQUIRE(m.feed(static_cast<uint8_t>(c)));
    structured::allowed_tokens(m, vocab, std::vector<int32_t>{2}, bits);
    CHECK(test::check_mask_by_brute_force(bits, m, vocab, 2) > 0);
    masks.allowed(structured::OutputMatcher(m), std::vector<int32_t>{2}, cached);
    masks.allowed(structured::OutputMatcher(m), std::vector<int32_t>{2}, cached);  // the second from the cache
    CHECK(cached == bits);
  }
}
