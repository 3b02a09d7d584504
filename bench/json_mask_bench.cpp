// The cost of response_format json_object and json_schema per sampled row: structured::allowed_tokens (the ids the
// JSON matcher takes next) over real vocabularies, at matcher states between values and inside strings and numbers
// (and under a schema: in a key, a bounded string, an enum value, an integer, a format's or a pattern's string, a
// bounded number; and tool_choice required's array of a tagged union: in the tag, a key, an integer), and the
// one-off TokenVocabulary::from; then response_format regex (vLLM's guided_regex / guided_choice) and grammar
// (GBNF): each pattern's or grammar's compile time and its masks at a few states, walked and from a MaskCache.
// Prints the best of several repetitions (the machine is shared) in microseconds.
// Usage: actord_json_mask_bench [repetitions] [tokenizer folder ...] (default: the test fixtures' stories260K,
// GPT-2 and Qwen3 vocabularies)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "structured/grammar.hpp"
#include "structured/json_matcher.hpp"
#include "structured/regex.hpp"
#include "structured/token_mask.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

namespace {

double micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// `Compiled::compile(text)` `repetitions` times into `out`: the best time in us, or a negative one after printing
// the error.
template <class Compiled>
double best_compile(const std::string& text, int repetitions, Compiled& out) {
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto compiled = Compiled::compile(text);
    best = std::min(best, micros_since(t0));
    if (!compiled) {
      std::fprintf(stderr, "%s\n", compiled.error().message.c_str());
      return -1.0;
    }
    out = std::move(*compiled);
  }
  return best;
}

// A schema's, regex's or grammar's masks at each state (the prefix fed): the trie walk a state's first mask costs,
// and what every later one costs through a MaskCache; and how many ids are allowed there.
template <class Matcher, class Compiled>
void print_masks(const char* kind, const char* title, const Compiled& compiled,
                 const std::vector<std::pair<const char*, std::string>>& states,
                 const structured::TokenVocabulary& vocab, std::span<const int32_t> stops, int repetitions) {
  std::printf("  %s %s (first mask of a state | cached)\n", kind, title);
  const structured::MaskCache masks(vocab, std::make_shared<structured::MaskBudget>(int64_t{64} << 20));
  std::vector<uint64_t> bits;
  for (const auto& [name, prefix] : states) {
    Matcher m(compiled);
    for (char ch : prefix) m.feed(static_cast<uint8_t>(ch));
    double walk = 1e30, cached = 1e30;
    for (int r = 0; r < repetitions; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      structured::allowed_tokens(m, vocab, stops, bits);
      walk = std::min(walk, micros_since(t0));
      t0 = std::chrono::steady_clock::now();
      masks.allowed(structured::OutputMatcher(m), stops, bits);
      if (r > 0) cached = std::min(cached, micros_since(t0));
    }
    int allowed = 0;
    for (uint64_t w : bits) allowed += __builtin_popcountll(w);
    std::printf("    %-17s %9.1f us | %6.1f us  %7d ids allowed\n", name, walk, cached, allowed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 20;
  std::vector<std::string> dirs;
  for (int i = 2; i < argc; ++i) dirs.emplace_back(argv[i]);
  if (dirs.empty()) {
    const std::string src = ACTORD_SOURCE_DIR;
    dirs = {src + "/models/stories260K", src + "/tests/fixtures/tokenizers/gpt2",
            src + "/tests/fixtures/tokenizers/qwen3"};
  }
  const std::vector<std::pair<const char*, std::string>> states{
      {"start", ""}, {"after {", "{"}, {"in a key", "{\"na"}, {"after :", "{\"name\":"},
      {"in a string", "{\"name\": \"Lily went to the"}, {"in a number", "{\"a\": 12"}, {"after a value", "{\"a\": 1"},
      {"complete", "{\"a\": 1}"}};
  auto schema = structured::JsonSchema::compile(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 32}, "age": {"type": "integer"},
          "color": {"enum": ["red", "green", "blue"]}, "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "color", "tags"]})");
  if (!schema) {
    std::fprintf(stderr, "%s\n", schema.error().message.c_str());
    return 1;
  }
  const std::vector<std::pair<const char*, std::string>> schema_states{
      {"after {", "{"}, {"in a key", "{\"na"}, {"bounded string", "{\"name\": \"Lily went to the"},
      {"in an integer", "{\"name\": \"a\", \"age\": 12"},
      {"in an enum", "{\"name\": \"a\", \"age\": 1, \"color\": \"gr"},
      {"free string", "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"tags\": [\"Lily went"}};
  // tool_choice required over two tools (api/openai_tools.cpp builds this): an array of a tagged union.
  auto tools = structured::JsonSchema::compile(
      R"({"type": "array", "minItems": 1, "items": {"anyOf": [
          {"type": "object", "properties": {"name": {"const": "get_weather"}, "parameters": {"type": "object",
           "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}},
           "required": ["name", "parameters"], "additionalProperties": false},
          {"type": "object", "properties": {"name": {"const": "add"}, "parameters": {"type": "object",
           "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}},
           "required": ["name", "parameters"], "additionalProperties": false}]}})");
  if (!tools) {
    std::fprintf(stderr, "%s\n", tools.error().message.c_str());
    return 1;
  }
  const std::vector<std::pair<const char*, std::string>> tool_states{
      {"start", ""}, {"in the tag", "[{\"name\": \"ge"},
      {"in a key", "[{\"name\": \"get_weather\", \"parameters\": {\"ci"},
      {"in an integer", "[{\"name\": \"add\", \"parameters\": {\"a\": 12"},
      {"after a call", "[{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}"}};
  // Strings under a format or a pattern (a regex per byte of the trie walk), numbers under bounds.
  auto formats = structured::JsonSchema::compile(
      R"({"type": "object", "properties": {"day": {"type": "string", "format": "date"},
          "mail": {"type": "string", "format": "email"}, "title": {"type": "string", "pattern": "[A-Za-z ,]{1,40}"},
          "age": {"type": "integer", "minimum": 0, "maximum": 120},
          "score": {"type": "number", "minimum": 0, "maximum": 1},
          "link": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083}},
          "required": ["day", "mail", "title", "age", "score", "link"]})");
  if (!formats) {
    std::fprintf(stderr, "%s\n", formats.error().message.c_str());
    return 1;
  }
  const std::vector<std::pair<const char*, std::string>> format_states{
      {"in a date", "{\"day\": \"2024-0"},
      {"in an e-mail", "{\"day\": \"2024-01-01\", \"mail\": \"lily"},
      {"in a pattern", "{\"day\": \"2024-01-01\", \"mail\": \"a@b.io\", \"title\": \"Lily went"},
      {"in a bounded integer", "{\"day\": \"2024-01-01\", \"mail\": \"a@b.io\", \"title\": \"x\", \"age\": 1"},
      {"in a bounded number",
       "{\"day\": \"2024-01-01\", \"mail\": \"a@b.io\", \"title\": \"x\", \"age\": 1, \"score\": 0."},
      {"in an HttpUrl",
       "{\"day\": \"2024-01-01\", \"mail\": \"a@b.io\", \"title\": \"x\", \"age\": 1, \"score\": 0, "
       "\"link\": \"https://example.com/a"}};
  struct Section {
    const char* title;
    const structured::JsonSchema* schema;
    const std::vector<std::pair<const char*, std::string>>* states;
  };
  const std::vector<Section> sections{{"json_object", &structured::JsonSchema::any_object(), &states},
                                      {"json_schema (4 required properties)", schema->get(), &schema_states},
                                      {"tool_choice required (2 tools: an array of a tagged union)", tools->get(),
                                       &tool_states},
                                      {"json_schema (formats, a pattern, bounds)", formats->get(), &format_states}};
  // Regexes: a classification's choices, a bounded sentence, a date, an e-mail address and any one line.
  struct RegexCase {
    const char* name;
    std::string pattern;
    std::vector<std::pair<const char*, std::string>> states;
    structured::Regex re;
  };
  const std::vector<std::string> labels = {"positive", "negative", "neutral", "mixed feelings"};
  std::vector<RegexCase> regexes{
      {"choice of 4", structured::regex_of_choices(labels), {{"start", ""}, {"in a choice", "neg"}}, {}},
      {"sentence", R"((Lily|Tom|Ben) (was|had|saw) [a-z ,]{1,40}\.)",
       {{"start", ""}, {"in [a-z ,]", "Lily was a little"}, {"at the end", "Tom had a dog."}}, {}},
      {"date", R"(\d{4}-\d{2}-\d{2})", {{"start", ""}, {"in the month", "2026-1"}}, {}},
      {"e-mail", R"([a-z0-9._]+@[a-z]+\.(com|org))", {{"start", ""}, {"in the domain", "lily.b@exam"}}, {}},
      {"any line", ".*", {{"start", ""}, {"in text", "Lily went to the"}}, {}},
  };
  std::printf("best of %d, one thread\n", repetitions);
  for (RegexCase& c : regexes) {
    const double best = best_compile(c.pattern, repetitions, c.re);
    if (best < 0) return 1;
    std::printf("regex %-12s compiled in %8.1f us, %5d DFA states: %s\n", c.name, best, c.re.states(),
                c.pattern.c_str());
  }
  // GBNF grammars: arithmetic (recursive), and a JSON grammar as llama.cpp's grammars/json.gbnf writes one.
  struct GrammarCase {
    const char* name;
    std::string text;
    std::vector<std::pair<const char*, std::string>> states;
    structured::Grammar g;
  };
  std::vector<GrammarCase> grammars{
      {"arithmetic", "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= factor ((\"*\" | \"/\") factor)*\n"
                     "factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n",
       {{"start", ""}, {"in a number", "(12+3"}, {"after an operator", "(12+3)*"}}, {}},
      {"json", "root ::= object\nvalue ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
               "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
               "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
               "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
               "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
               "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n",
       {{"start", ""}, {"in a key", "{\"na"}, {"in a string", "{\"name\": \"Lily went to the"},
        {"after a value", "{\"a\": 1"}}, {}},
  };
  for (GrammarCase& c : grammars) {
    const double best = best_compile(c.text, repetitions, c.g);
    if (best < 0) return 1;
    std::printf("grammar %-10s compiled in %8.1f us, %5zu elements\n", c.name, best, c.g.elems().size());
  }
  std::printf("us per mask (a sampled row of a json_object / json_schema / regex / grammar sequence)\n");
  for (const std::string& dir : dirs) {
    auto tok = Tokenizer::load(dir);
    if (!tok) {
      std::fprintf(stderr, "%s\n", tok.error().message.c_str());
      return 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    const auto vocab = structured::TokenVocabulary::from(*tok, tok->vocab_size());
    std::printf("%s: vocabulary %d, its bytes gathered in %.0f us\n", dir.c_str(), vocab.size(), micros_since(t0));
    std::vector<uint64_t> bits;
    // JSON: a cache keeps only what a pattern's or a format's string takes before it closes; elsewhere the second
    // column is the walk again.
    for (const Section& section : sections)
      print_masks<structured::JsonMatcher>("json", section.title, *section.schema, *section.states, vocab,
                                           tok->stop_ids(), repetitions);
    for (const RegexCase& c : regexes)
      print_masks<structured::RegexMatcher>("regex", c.name, c.re, c.states, vocab, tok->stop_ids(), repetitions);
    // Grammar walks of large vocabularies take long: five repetitions at most.
    for (const GrammarCase& c : grammars)
      print_masks<structured::GrammarMatcher>("grammar", c.name, c.g, c.states, vocab, tok->stop_ids(),
                                              std::min(repetitions, 5));
  }
  return 0;
}
