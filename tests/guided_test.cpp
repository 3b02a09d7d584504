// Constrained text through the engine and the HTTP API: response_format regex (vLLM's guided_regex, guided_choice
// and structured_outputs {regex | choice}) and grammar (guided_grammar, structured_outputs {grammar}: GBNF) - every
// output matches whole and ends at a stop id, in-process and in a worker process alike, for forked samples too; bad
// patterns and grammars and impossible combinations are refused naming the field, and the server keeps serving.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "http_client_util.hpp"
#include "serve_test_util.hpp"
#include "structured/grammar.hpp"
#include "structured/regex.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
using json = nlohmann::json;
using test::call;
using test::Reply;
using test::Served;

namespace {

constexpr const char* kSentence = R"((Lily|Tom|Ben) (was|had|saw) [a-z ,]{1,40}\.)";
// Sentences of two parts, nested: what a regex cannot say.
constexpr const char* kStory = R"(root ::= sentence (" " sentence)?
sentence ::= name " " verb " " words ("." | " (" words ").")
name ::= "Lily" | "Tom" | "Ben"
verb ::= "was" | "had" | "saw"
words ::= [a-z]{1,8} (" " [a-z]{1,8}){0,2})";

bool sentence_of(const std::string& grammar, const std::string& text) {
  auto g = structured::Grammar::compile(grammar);
  REQUIRE(g);
  structured::GrammarMatcher m(*g);
  for (const char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

bool full_match(const std::string& pattern, const std::string& text) {
  auto re = structured::Regex::compile(pattern);
  REQUIRE(re);
  structured::RegexMatcher m(*re);
  for (const char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

GenerateRequest regex_request(const std::string& pattern, float temperature, uint64_t seed, uint32_t n = 1,
                              bool grammar = false) {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  GenerateRequest r;
  r.prompt_ids = tok->encode("Once upon a time", true);
  r.max_tokens = 64;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.n = n;
  r.max_tokens = grammar ? 160 : 64;
  r.sampling.response_format = grammar ? ResponseFormat::grammar : ResponseFormat::regex;
  (grammar ? r.sampling.grammar : r.sampling.regex) = pattern;
  return r;
}

}  // namespace

TEST_CASE("regex through the engine: every output matches whole and ends at a stop id - in a worker process the "
          "same - forked samples too - a bad pattern is refused and the engine keeps serving",
          "[structured][regex][engine]") {
  const std::vector<std::string> choices = {"happy", "sad", "a little scared", "very, very happy!"};
  const std::string choice = structured::regex_of_choices(choices);
  std::vector<GenerateRequest> requests{regex_request(kSentence, 0.0f, 0), regex_request(choice, 0.0f, 0),
                                        regex_request(R"(\d{1,3}(\.\d{1,3}){3})", 0.0f, 0),
                                        regex_request(kSentence, 1.0f, 7, 3)};
  for (uint64_t seed = 1; seed <= 4; ++seed) requests.push_back(regex_request(kSentence, 1.0f, seed));
  for (uint64_t seed = 1; seed <= 3; ++seed) requests.push_back(regex_request(choice, 1.2f, seed));
  requests.push_back(regex_request(kStory, 0.0f, 0, 1, true));
  for (uint64_t seed = 1; seed <= 3; ++seed) requests.push_back(regex_request(kStory, 1.0f, seed, 1, true));
  std::vector<std::string> first;
  for (const char* config : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    INFO(config);
    auto engine = test::start_engine(test::quickstart(config));
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    std::vector<std::string> texts;
    for (size_t i = 0; i < out->size(); ++i) {
      const GenerateOutput& o = (*out)[i];
      INFO("output " << i << ": " << o.text);
      REQUIRE_FALSE(o.error);
      CHECK(o.finish_reason == "stop");  // each pattern bounds the text: it ends within max_tokens
      texts.push_back(o.text);
    }
    // Outputs go by request, samples of one request after each other: requests 0-2 one each, request 3 three.
    REQUIRE(texts.size() == requests.size() + 2);
    CHECK(full_match(kSentence, texts[0]));
    CHECK(std::find(choices.begin(), choices.end(), texts[1]) != choices.end());
    CHECK(full_match(R"(\d{1,3}(\.\d{1,3}){3})", texts[2]));
    for (size_t i = 3; i < 10; ++i) CHECK(full_match(kSentence, texts[i]));
    for (size_t i = 10; i < 13; ++i) CHECK(std::find(choices.begin(), choices.end(), texts[i]) != choices.end());
    for (size_t i = 13; i < texts.size(); ++i) CHECK(sentence_of(kStory, texts[i]));
    if (first.empty()) first = texts;
    else CHECK(texts == first);  // seeded draws: the same in a worker process
  }
  auto engine = test::start_engine(test::quickstart());
  auto refused = engine->generate({regex_request("(Lily", 0.0f, 0)});
  REQUIRE(refused.ok());
  REQUIRE((*refused)[0].error);
  CHECK_THAT((*refused)[0].error->message,
             Catch::StartsWith("response_format: regex: missing ), unterminated group at offset 0"));
  refused = engine->generate({regex_request("root ::= x", 0.0f, 0, 1, true)});
  REQUIRE(refused.ok());
  REQUIRE((*refused)[0].error);
  CHECK_THAT((*refused)[0].error->message, Catch::StartsWith("response_format: grammar: undefined rule x"));
  auto still = engine->generate({requests[0]});
  REQUIRE(still.ok());
  CHECK((*still)[0].text == first[0]);
}

TEST_CASE("serve - guided_regex, guided_choice and structured_outputs constrain the text, streamed too - bad "
          "patterns and combinations are refused naming the field",
          "[serve][regex]") {
  test::TempDir tmp;  // stories260K with a chat template of our own
  const auto model = test::copy_stories(tmp.path());
  test::write_file(model / "tokenizer_config.json",
                   R"({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})");
  Served s("", 1 << 20, model.string());
  auto post = [&](const std::string& target, const json& body) { return call(s.port, "POST", target, body.dump()); };
  const json chat{{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}, {"max_tokens", 64},
                  {"temperature", 0.9}, {"seed", 3}};
  // guided_choice: the content is one of the choices.
  const std::vector<std::string> choices = {"yes", "no", "maybe later"};
  for (const char* field : {"guided_choice", "structured_outputs"}) {
    json body = chat;
    if (std::string(field) == "guided_choice") body["guided_choice"] = choices;
    else body["structured_outputs"] = {{"choice", choices}};
    const Reply r = post("/v1/chat/completions", body);
    REQUIRE(r.status == 200);
    const json c = json::parse(r.body)["choices"][0];
    INFO(c.dump());
    CHECK(std::find(choices.begin(), choices.end(), c["message"]["content"].get<std::string>()) != choices.end());
    CHECK(c["finish_reason"] == "stop");
  }
  // guided_regex on completions, plain and streamed: the same text, matched whole.
  json completion{{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0}, {"guided_regex", kSentence}};
  const Reply plain = post("/v1/completions", completion);
  REQUIRE(plain.status == 200);
  const std::string text = json::parse(plain.body)["choices"][0]["text"];
  INFO(text);
  CHECK(full_match(kSentence, text));
  completion["stream"] = true;
  const Reply streamed = post("/v1/completions", completion);
  REQUIRE(streamed.status == 200);
  std::string joined;
  for (const std::string& e : test::events_of(streamed.body)) {
    if (e == "[DONE]") continue;
    joined += json::parse(e)["choices"][0]["text"].get<std::string>();
  }
  CHECK(joined == text);
  json so = chat;
  so["structured_outputs"] = {{"regex", "[0-9]{4}-[0-9]{2}"}};
  const Reply date = post("/v1/chat/completions", so);
  REQUIRE(date.status == 200);
  CHECK(full_match("[0-9]{4}-[0-9]{2}", json::parse(date.body)["choices"][0]["message"]["content"]));
  // guided_grammar and structured_outputs {grammar}: a sentence of the GBNF grammar.
  for (const char* field : {"guided_grammar", "structured_outputs"}) {
    json body = chat;
    body["max_tokens"] = 160;
    if (std::string(field) == "guided_grammar") body["guided_grammar"] = kStory;
    else body["structured_outputs"] = {{"grammar", kStory}};
    const Reply r = post("/v1/chat/completions", body);
    REQUIRE(r.status == 200);
    const json c = json::parse(r.body)["choices"][0];
    INFO(c.dump());
    CHECK(sentence_of(kStory, c["message"]["content"]));
    CHECK(c["finish_reason"] == "stop");
  }

  auto refusal = [&](const json& body) {
    const Reply r = post("/v1/chat/completions", body);
    CHECK(r.status == 400);
    const json e = json::parse(r.body)["error"];
    return e["param"].get<std::string>() + " | " + e["message"].get<std::string>();
  };
  json bad = chat;
  bad["guided_regex"] = "[a-z";
  CHECK(refusal(bad) == "guided_regex | guided_regex: regex: missing ], unterminated character set at offset 0");
  bad["guided_regex"] = "(?=x)y";
  CHECK_THAT(refusal(bad), Catch::Contains("lookaround is not supported"));
  bad["guided_regex"] = 5;
  CHECK(refusal(bad) == "guided_regex | guided_regex: must be a string, got 5");
  bad = chat;
  bad["guided_choice"] = json::array();
  CHECK_THAT(refusal(bad), Catch::StartsWith("guided_choice | guided_choice: must be a non-empty list of strings"));
  bad["guided_choice"] = {"a", 1};
  CHECK_THAT(refusal(bad), Catch::Contains("got 1 in it"));
  bad["guided_choice"] = {"a", "b"};
  bad["guided_regex"] = "a";
  CHECK_THAT(refusal(bad), Catch::Contains("cannot be combined with guided_regex"));
  bad = chat;
  bad["guided_grammar"] = "root ::= x";
  CHECK(refusal(bad) == "guided_grammar | guided_grammar: grammar: undefined rule x (line 1)");
  bad["guided_grammar"] = "root ::= root \"a\" | \"b\"";
  CHECK_THAT(refusal(bad), Catch::Contains("left recursion"));
  bad = chat;
  bad["structured_outputs"] = {{"structural_tag", "x"}};
  CHECK_THAT(refusal(bad),
             Catch::Contains("structural_tag is not supported; supported: json, json_object, regex, choice, grammar"));
  bad["structured_outputs"] = "regex";
  CHECK_THAT(refusal(bad), Catch::Contains("must be an object"));
  bad = chat;
  bad["guided_regex"] = "a+";
  bad["response_format"] = {{"type", "json_object"}};
  CHECK_THAT(refusal(bad), Catch::Contains("guided_regex: cannot be combined with a response_format of json_object"));
  bad.erase("response_format");
  bad["ignore_eos"] = true;
  CHECK_THAT(refusal(bad), Catch::StartsWith("ignore_eos | ") && Catch::Contains("regex"));
  CHECK(post("/v1/chat/completions", chat).status == 200);  // still serving
}

TEST_CASE("serve - guided_json, structured_outputs json and json_object, llama-server's json_schema and grammar "
          "constrain the text - bad schemas are refused naming the field",
          "[serve][json_schema]") {
  test::TempDir tmp;
  const auto model = test::copy_stories(tmp.path());
  test::write_file(model / "tokenizer_config.json",
                   R"({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})");
  Served s("", 1 << 20, model.string());
  auto post = [&](const json& body) { return call(s.port, "POST", "/v1/chat/completions", body.dump()); };
  const json chat{{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}, {"max_tokens", 160},
                  {"temperature", 0.9}, {"seed", 5}};
  using ordered = nlohmann::ordered_json;
  const ordered schema = ordered::parse(R"({"type": "object", "properties": {"age": {"type": "integer",
      "minimum": 1, "maximum": 9}, "day": {"type": "string", "format": "date"}}, "required": ["age", "day"]})");
  auto content_of = [](const Reply& r) {
    REQUIRE(r.status == 200);
    const json c = json::parse(r.body)["choices"][0];
    INFO(c.dump());
    CHECK(c["finish_reason"] == "stop");
    return c["message"]["content"].get<std::string>();
  };
  // The schema as an object (vLLM's guided_json, its text too; structured_outputs.json; llama-server's json_schema):
  // an object of it, its keys in the schema's order.
  for (const std::string field : {"guided_json", "guided_json text", "structured_outputs", "json_schema"}) {
    INFO(field);
    json body = chat;
    const json as_object = json::parse(schema.dump());  // the body's own type; dump() keeps the order
    if (field == "guided_json") body["guided_json"] = as_object;
    if (field == "guided_json text") body["guided_json"] = schema.dump();
    if (field == "structured_outputs") body["structured_outputs"] = {{"json", as_object}};
    if (field == "json_schema") body["json_schema"] = as_object;
    body["guided_decoding_backend"] = "xgrammar";  // read, and of no effect
    const std::string text = content_of(post(body));
    INFO(text);
    const json doc = json::parse(text);
    CHECK(doc["age"].get<int>() >= 1);
    CHECK(doc["age"].get<int>() <= 9);
    CHECK(doc["day"].get<std::string>().size() == 10);
  }
  json object_mode = chat;
  object_mode["structured_outputs"] = {{"json_object", true}};
  object_mode["logit_bias"] = {{"128", 100}};  // "}" forced where allowed: the object closes
  CHECK(json::parse(content_of(post(object_mode))).is_object());
  json llama_grammar = chat;
  llama_grammar["grammar"] = kStory;
  CHECK(sentence_of(kStory, content_of(post(llama_grammar))));

  auto refusal = [&](const json& body) {
    const Reply r = post(body);
    CHECK(r.status == 400);
    const json e = json::parse(r.body)["error"];
    return e["param"].get<std::string>() + " | " + e["message"].get<std::string>();
  };
  json bad = chat;
  bad["guided_json"] = {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}, {"multipleOf", 2}}}}}};
  CHECK_THAT(refusal(bad), Catch::StartsWith("guided_json | guided_json: multipleOf is not supported") &&
                               Catch::EndsWith("(at /properties/n)"));
  bad["guided_json"] = 5;
  CHECK(refusal(bad) == "guided_json | guided_json: must be a JSON schema (an object or its text), got 5");
  bad["guided_json"] = "{not json";
  CHECK_THAT(refusal(bad), Catch::StartsWith("guided_json | guided_json: the schema is not valid JSON"));
  bad = chat;
  bad["json_schema"] = {{"type", "object"}};
  bad["grammar"] = kStory;
  CHECK_THAT(refusal(bad), Catch::StartsWith("grammar | grammar: cannot be combined with json_schema"));
  bad = chat;
  bad["structured_outputs"] = {{"json_object", "yes"}};
  CHECK(refusal(bad) == "structured_outputs.json_object | structured_outputs.json_object: must be a boolean, got \"yes\"");
  bad = chat;
  bad["guided_decoding_backend"] = 3;
  CHECK(refusal(bad) == "guided_decoding_backend | guided_decoding_backend: must be a string, got 3");
  bad = chat;
  bad["guided_json"] = {{"type", "object"}};
  bad["response_format"] = {{"type", "json_object"}};
  CHECK_THAT(refusal(bad), Catch::Contains("guided_json: cannot be combined with a response_format of json_object"));
  CHECK(post(chat).status == 200);  // still serving
}
