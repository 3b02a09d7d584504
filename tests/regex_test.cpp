// structured/regex: the DFA against Python's re as the peer (tests/reference/check_regex.py: random texts the DFA
// takes, and mutations of them it may refuse, each checked by re.fullmatch), refused patterns naming what and
// where, the choices' alternation, and token masks under a regex against a brute force over the stories260K
// vocabulary.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "structured/output_matcher.hpp"
#include "structured/regex.hpp"
#include "structured/token_mask.hpp"
#include "reference_util.hpp"
#include "test_util.hpp"
#include "token_mask_util.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
using structured::Regex;
using structured::RegexMatcher;

namespace {

Regex compiled(const std::string& pattern) {
  auto re = Regex::compile(pattern);
  INFO(pattern << ": " << (re ? "" : re.error().message));
  REQUIRE(re);
  return std::move(*re);
}

bool full_match(const Regex& re, const std::string& text) {
  RegexMatcher m(re);
  for (const char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

std::string refusal(const std::string& pattern) {
  auto re = Regex::compile(pattern);
  return re ? std::string("compiled") : re.error().message;
}

// A text the DFA takes whole: bytes drawn among those it allows, ended at an accepting state (empty when none was
// reached within `limit` bytes).
std::string random_walk(const Regex& re, std::mt19937& rng, size_t limit) {
  RegexMatcher m(re);
  std::string text;
  while (text.size() < limit) {
    std::vector<uint8_t> next;
    for (int b = 0; b < 256; ++b)
      if (RegexMatcher copy = m; copy.feed(static_cast<uint8_t>(b))) next.push_back(static_cast<uint8_t>(b));
    if (m.complete() && (next.empty() || rng() % 4 == 0)) return text;
    REQUIRE_FALSE(next.empty());  // only states that can still match are kept
    // Favour ASCII so that texts are not all 4-byte characters of the widest classes.
    std::vector<uint8_t> ascii;
    for (const uint8_t b : next)
      if (b < 0x80) ascii.push_back(b);
    const uint8_t b = !ascii.empty() && rng() % 4 != 0 ? ascii[rng() % ascii.size()] : next[rng() % next.size()];
    REQUIRE(m.feed(b));
    text += static_cast<char>(b);
  }
  return m.complete() ? text : std::string();
}

const std::vector<std::string>& alphabet() {
  static const std::vector<std::string> a = {"a", "b", "z", "Z", "0", "7", "_", " ", "\n", "-", ".", "@", "é", "世",
                                             "😀", "\t", "x", "s", "(", "|"};
  return a;
}

}  // namespace

TEST_CASE("regex: texts the DFA takes, and mutations of them, are judged alike by Python's re (the peer)",
          "[structured][regex]") {
  const std::vector<std::string> patterns = {
      "[a-z]+",
      R"(\d{3}-\d{4})",
      "(cat|dog|bird)s?",
      "[A-Z][a-z]*( [A-Z][a-z]*){0,3}",
      "(?:ab|a)*b",
      R"(\w+@\w+\.(com|org))",
      "[^aeiou\\n]{2,5}",
      ".{0,6}x",
      "(a|b)*abb",
      R"([0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)",
      "é+[世界]*😀?",
      R"([\u00e0-\u00ff]{1,3})",
      R"((?P<year>\d{4})-(0[1-9]|1[0-2]))",
      "a{2,}b{,2}c{3}",
      R"([\s\S]{2})",
      R"(\W\D\S)",
      "^(yes|no)$",
      "[]a-]+",
      "x*?y+?z??",
      R"([\x00-\x7f]{0,3}[^\x00-\x7f])",
      "(|a)(b|)",
      R"(\.\*\+\?\(\)\[\]\{\}\|\\)",
      "a{,}b{3",
      R"([\d_-]+\t[^\s]?)",
  };
  std::mt19937 rng(11);
  nlohmann::json cases = nlohmann::json::array();
  size_t texts = 0, matched = 0;
  for (const std::string& pattern : patterns) {
    const Regex re = compiled(pattern);
    nlohmann::json c{{"pattern", pattern}, {"texts", nlohmann::json::array()}, {"matches", nlohmann::json::array()}};
    for (int i = 0; i < 40; ++i) {
      const std::string text = random_walk(re, rng, 60);
      if (text.empty() && !re.accepting(re.start())) continue;
      const std::string once = test::mutated(text, rng, alphabet());
      for (const std::string& t : {text, once, test::mutated(once, rng, alphabet())}) {
        const bool m = full_match(re, t);
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
  const test::ReferenceRun run = test::run_reference("check_regex.py", cases);
  INFO(run.report);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.report, Catch::Contains(std::to_string(texts) + " texts, " + std::to_string(matched) +
                                         " matched, 0 disagree"));
}

TEST_CASE("regex: hand-written texts - whole matches, UTF-8 characters, a refused byte changes nothing",
          "[structured][regex]") {
  const Regex phone = compiled(R"(\(\d{3}\) \d{3}-\d{4})");
  CHECK(full_match(phone, "(555) 123-4567"));
  CHECK_FALSE(full_match(phone, "(555) 123-4567 "));  // the whole text, not a prefix
  CHECK_FALSE(full_match(phone, "555 123-4567"));
  const Regex any = compiled(".*");
  CHECK(full_match(any, "héllo 世界 😀"));
  CHECK_FALSE(full_match(any, "a\nb"));           // . is not a newline
  CHECK_FALSE(full_match(any, "\xC3"));           // a character cut short never ends a match
  CHECK_FALSE(full_match(any, "\xED\xA0\x80"));   // a surrogate's encoding is not UTF-8
  CHECK_FALSE(full_match(any, "\xC0\xAF"));       // an overlong form neither
  RegexMatcher m(phone);
  CHECK(m.feed('('));
  const int32_t before = m.state();
  CHECK_FALSE(m.feed('x'));
  CHECK(m.state() == before);
  // Dead ends are never entered: in (ab|ac)d after "a", only b and c go on.
  const Regex branch = compiled("(ab|ac)d");
  RegexMatcher b(branch);
  REQUIRE(b.feed('a'));
  int continuing = 0;
  for (int c = 0; c < 256; ++c) continuing += branch.next(b.state(), static_cast<uint8_t>(c)) != Regex::kDead;
  CHECK(continuing == 2);
  // A state where the text can only end: no byte continues it.
  const Regex yes = compiled("yes");
  RegexMatcher y(yes);
  for (const char c : std::string("yes")) REQUIRE(y.feed(static_cast<uint8_t>(c)));
  CHECK(y.complete());
  CHECK_FALSE(y.continues());
}

TEST_CASE("regex: patterns refused naming what and where", "[structured][regex]") {
  CHECK_THAT(refusal("a(b"), Catch::StartsWith("regex: missing ), unterminated group at offset 1"));
  CHECK_THAT(refusal("a)b"), Catch::StartsWith("regex: unbalanced ')' at offset 1"));
  CHECK_THAT(refusal("*a"), Catch::Contains("nothing to repeat at offset 0"));
  CHECK_THAT(refusal("a**"), Catch::Contains("multiple repeat at offset 2"));
  CHECK_THAT(refusal("a++"), Catch::Contains("possessive"));
  CHECK_THAT(refusal("[z-a]"), Catch::Contains("range out of order at offset 1"));
  CHECK_THAT(refusal("[a"), Catch::Contains("unterminated character set at offset 0"));
  CHECK_THAT(refusal("(?=a)b"), Catch::Contains("lookaround is not supported at offset 0"));
  CHECK_THAT(refusal("(a)\\1"), Catch::Contains("backreferences are not supported at offset 3"));
  CHECK_THAT(refusal("\\bword"), Catch::Contains("word boundaries"));
  CHECK_THAT(refusal("(?i)abc"), Catch::Contains("inline flags"));
  CHECK_THAT(refusal("a{3,1}"), Catch::Contains("out of order"));
  CHECK_THAT(refusal("ab\\"), Catch::Contains("may not end with a backslash"));
  CHECK_THAT(refusal("\\x4"), Catch::Contains("2 hex digits"));
  CHECK_THAT(refusal("\\q"), Catch::Contains("unknown escape \\q"));
  CHECK_THAT(refusal("a^b"), Catch::Contains("^ is only allowed at the start"));
  CHECK_THAT(refusal("a$b"), Catch::Contains("$ is only allowed at the end"));
  CHECK_THAT(refusal("[^\\x00-\\U0010ffff]"), Catch::Contains("matches nothing"));
  CHECK_THAT(refusal("[\\d-z]"), Catch::Contains("single characters"));
  CHECK_THAT(refusal("(a{1000}){1000}"), Catch::Contains("too large"));
  CHECK_THAT(refusal(".{5000}"), Catch::Contains("too large"));
  CHECK_THAT(refusal("\xff"), Catch::Contains("invalid UTF-8 at offset 0"));
  CHECK_THAT(refusal(std::string(Regex::kMaxPatternBytes + 1, 'a')), Catch::Contains("more than 65536 bytes"));
  CHECK(refusal("(?<name>a)") == "compiled");
  CHECK(refusal("") == "compiled");  // the empty text
}

TEST_CASE("regex: with_length keeps exactly the texts of its lengths, in characters, and never strands a walk",
          "[structured][regex]") {
  std::mt19937 rng(5);
  auto characters = [](const std::string& t) {
    return std::count_if(t.begin(), t.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; });
  };
  int kept = 0, dropped = 0;
  for (const char* pattern : {"[a-zé]*", "(ab|c)+", "[^\n]{0,12}x?", "(?:[a-z]{1,5}\\.)+", "世*a|b{2,9}"}) {
    const auto re = Regex::compile(pattern);
    REQUIRE(re.ok());
    for (const auto& [lo, hi] : {std::pair<uint32_t, uint32_t>{0, 3}, {2, 5}, {4, UINT32_MAX}, {3, 3}, {0, 40}}) {
      INFO(pattern << " lengths " << lo << ".." << hi);
      auto sized = re->with_length(lo, hi);
      if (!sized) {  // only where no text of those lengths matches
        CHECK(sized.error().message == "regex: no text matches the pattern");
        continue;
      }
      for (int i = 0; i < 300; ++i) {
        const std::string text = random_walk(*re, rng, 24);  // texts of the pattern, of any length
        if (!full_match(*re, text)) continue;                 // none reached within 24 bytes
        const auto n = static_cast<uint32_t>(characters(text));
        INFO(text);
        CHECK(full_match(*sized, text) == (n >= lo && n <= hi));
        (n >= lo && n <= hi ? kept : dropped) += 1;
        const std::string short_text = random_walk(*sized, rng, 64);  // the bounded regex's own texts
        if (short_text.empty() && !full_match(*sized, "")) continue;  // none reached within 64 bytes
        CHECK(full_match(*sized, short_text));
        CHECK(full_match(*re, short_text));
        CHECK(characters(short_text) >= lo);
        CHECK(characters(short_text) <= hi);
      }
    }
  }
  CHECK(kept > 500);
  CHECK(dropped > 500);
}

TEST_CASE("regex: the choices' alternation matches each choice literally and nothing else", "[structured][regex]") {
  const std::vector<std::string> choices = {"positive", "neg.ative (1)", "a|b", "[x]*", "", "世界\n", "back\\slash"};
  const Regex re = compiled(structured::regex_of_choices(choices));
  for (const std::string& c : choices) CHECK(full_match(re, c));
  CHECK_FALSE(full_match(re, "negXative (1)"));
  CHECK_FALSE(full_match(re, "a"));
  CHECK_FALSE(full_match(re, "xx"));
  CHECK_FALSE(full_match(re, "positive "));
}

TEST_CASE("token masks under a regex: the ids whose bytes the DFA takes whole, stop ids where the text may end",
          "[structured][regex]") {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  const auto vocab = structured::TokenVocabulary::from(*tok, 512);
  const std::vector<int32_t> stops{2};
  std::vector<uint64_t> bits;
  const Regex re = compiled("(Once|Lily) [a-z ]{0,12}(\\.|!)");
  for (const std::string prefix : {"", "On", "Lily", "Once up", "Lily had a big.", "Lily abcdefghijkl"}) {
    INFO(prefix);
    RegexMatcher m(re);
    for (const char c : prefix) REQUIRE(m.feed(static_cast<uint8_t>(c)));
    const structured::OutputMatcher om(m);
    structured::allowed_tokens(om, vocab, stops, bits);
    const int count = test::check_mask_by_brute_force(bits, m, vocab, 2);
    if (prefix == "Lily had a big.") CHECK(count == 1);  // only the end
    else CHECK(count > 0);
  }
  // Under a maximum length (with_length): walked and through a cache keyed by the room left, as the brute force.
  const auto sized = re.with_length(0, 14);
  REQUIRE(sized.ok());
  const structured::MaskCache cache(vocab, std::make_shared<structured::MaskBudget>(int64_t{1} << 30));
  for (const std::string prefix : {"", "Lily", "Lily ", "Lily ab", "Lily abcd", "Lily abcdefg", "Lily abcdefgh"}) {
    INFO("at most 14: " << prefix);
    RegexMatcher m(*sized);
    for (const char c : prefix) REQUIRE(m.feed(static_cast<uint8_t>(c)));
    for (int pass = 0; pass < 2; ++pass) {
      cache.allowed(structured::OutputMatcher(m), stops, bits);
      CHECK(test::check_mask_by_brute_force(bits, m, vocab, 2) > 0);
    }
  }
}

TEST_CASE("regex masks: cached per state within a shared budget, equal to the walk, the budget given back",
          "[structured][regex]") {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  const auto vocab = structured::TokenVocabulary::from(*tok, 512);
  // A mask and its key (a state and the room below a maximum length).
  const int64_t one_mask = static_cast<int64_t>((512 + 63) / 64 * sizeof(uint64_t) + sizeof(std::pair<int32_t, uint32_t>));
  auto budget = std::make_shared<structured::MaskBudget>(2 * one_mask);  // room for two states' masks
  const std::vector<int32_t> stops{2};
  {
    const Regex re = compiled("[a-z]{0,6}!?");
    const structured::MaskCache masks(vocab, budget);
    std::vector<uint64_t> cached, walked;
    for (const std::string prefix : {"", "a", "ab", "abc", "", "a", "abcdef", "abcdef!"}) {
      INFO(prefix);
      RegexMatcher m(re);
      for (const char c : prefix) REQUIRE(m.feed(static_cast<uint8_t>(c)));
      masks.allowed(structured::OutputMatcher(m), stops, cached);
      structured::allowed_tokens(m, vocab, stops, walked);
      CHECK(cached == walked);
      CHECK(budget->left >= 0);
    }
    CHECK(budget->left == 0);  // two states cached, the others walked each time
  }
  CHECK(budget->left == 2 * one_mask);
}
