// response_format json_schema (structured/json_schema, JsonMatcher under a schema): documents the matcher admits,
// walked at random byte by byte, checked by the jsonschema package (Debian's python3-jsonschema, the peer:
// tests/reference/validate_json_schema.py); hand-written documents it must take or refuse; compile errors naming
// the keyword; token masks; and schemas through the whole engine.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_util.hpp"
#include "reference_util.hpp"
#include "structured/compile_check.hpp"
#include "structured/json_matcher.hpp"
#include "structured/json_schema.hpp"
#include "structured/token_mask.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
using structured::JsonMatcher;
using structured::JsonSchema;
using ojson = nlohmann::ordered_json;

namespace {

std::shared_ptr<const JsonSchema> compiled(const std::string& schema) {
  auto s = JsonSchema::compile(schema);
  INFO(schema);
  REQUIRE(s.ok());
  return *s;
}

// Whether the schema's matcher takes `text` whole and complete.
bool admits(const JsonSchema& schema, const std::string& text) {
  JsonMatcher m(schema);
  for (const char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

std::string compile_error(const std::string& schema) {
  auto s = JsonSchema::compile(schema);
  return s.ok() ? std::string("(compiled)") : s.error().message;
}

// The bytes the matcher takes next.
std::vector<uint8_t> bytes_taken(const JsonMatcher& m) {
  std::vector<uint8_t> ok;
  for (int b = 0; b < 256; ++b) {
    JsonMatcher copy = m;
    if (copy.feed(static_cast<uint8_t>(b))) ok.push_back(static_cast<uint8_t>(b));
  }
  return ok;
}

// A random document the matcher admits: each next byte drawn among those it takes; past `soft_limit` bytes the
// closing ones first ('"', '}', ']', then short values), so that every walk ends.
std::string random_walk(const JsonSchema& schema, std::mt19937& rng, size_t soft_limit) {
  JsonMatcher m(schema);
  std::string out;
  static const std::string closing = "\"}]n0tf";
  while (!m.complete() && out.size() < 4096) {
    const std::vector<uint8_t> ok = bytes_taken(m);
    REQUIRE_FALSE(ok.empty());  // the matcher never strands a walk
    uint8_t pick = ok[rng() % ok.size()];
    // Printable ASCII most of the time, so that documents read well; any byte the matcher takes sometimes.
    std::vector<uint8_t> plain;
    for (uint8_t b : ok)
      if (b >= 0x20 && b < 0x7f) plain.push_back(b);
    if (!plain.empty() && rng() % 8 != 0) pick = plain[rng() % plain.size()];
    // Short values' first bytes only half the time: in a pattern's string they may be text that goes on.
    if (out.size() > soft_limit) {
      for (const char c : (rng() % 2 ? closing : closing.substr(0, 3))) {
        if (std::find(ok.begin(), ok.end(), static_cast<uint8_t>(c)) != ok.end()) {
          pick = static_cast<uint8_t>(c);
          break;
        }
      }
    }
    REQUIRE(m.feed(pick));
    out.push_back(static_cast<char>(pick));
  }
  INFO(out);
  REQUIRE(m.complete());
  return out;
}

// An array root whose items are a tagged union (what tool_choice "required" generates) or null.
const std::string kToolCalls = R"({"type": "array", "minItems": 1, "maxItems": 3, "items": {"anyOf": [
    {"type": "object", "properties": {"name": {"const": "get_weather"}, "parameters": {"type": "object",
     "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}}, "required": ["city"],
     "additionalProperties": false}}, "required": ["name", "parameters"], "additionalProperties": false},
    {"type": "object", "properties": {"name": {"enum": ["add", "sub"]}, "parameters": {"type": "object",
     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}},
     "required": ["name", "parameters"]},
    {"type": "null"}]}})";

const std::vector<std::string>& peer_schemas() {
  static const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
          "score": {"type": "number"}, "ok": {"type": "boolean"}, "none": {"type": "null"}},
          "required": ["name", "age", "ok"], "additionalProperties": false})",
      R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 1,
          "maxLength": 3}, "minItems": 1, "maxItems": 3}, "color": {"enum": ["red", "green", 1, 10, 1.5, null, true]},
          "unit": {"const": "kg"}}, "required": ["tags", "color"]})",
      R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}},
          "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"]})",
      R"({"type": "object", "properties": {"maybe": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
          "many": {"type": ["integer", "boolean", "null"]}, "free": {"type": "object"}, "anything": {},
          "quoted \"key\"\u00e9": {"type": "string", "minLength": 2, "maxLength": 2}}, "required": ["free"]})",
      kToolCalls,
      // Strings held to a pattern or a format (escapes decoded), numbers to bounds.
      R"~({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
          "code": {"pattern": "[A-Z]{2}\\d"}, "odd": {"type": "string", "pattern": "a\"b\\\\c[\\n\\t/]é{1,2}"},
          "d": {"type": "string", "format": "date"}, "dt": {"type": "string", "format": "date-time"},
          "t": {"type": "string", "format": "time"}, "dur": {"type": "string", "format": "duration"},
          "e": {"type": "string", "format": "email"}, "h": {"type": "string", "format": "hostname"},
          "ip4": {"type": "string", "format": "ipv4"}, "ip6": {"type": "string", "format": "ipv6"},
          "u": {"type": ["string", "null"], "format": "uuid"},
          "short": {"type": "string", "pattern": "[a-zé]+", "minLength": 2, "maxLength": 4},
          "mail": {"type": "string", "format": "email", "maxLength": 12},
          "link": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083}},
          "required": ["zip", "code", "odd", "d", "dt", "t", "dur", "e", "h", "ip4", "ip6", "u", "short", "mail",
                       "link"]})~",
      R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120},
          "below": {"type": "integer", "exclusiveMaximum": -5}, "big": {"type": "integer", "minimum": 1000},
          "half": {"type": "integer", "minimum": 2.5, "exclusiveMaximum": 9.5},
          "unit": {"type": "number", "minimum": 0, "maximum": 1}, "pos": {"type": "number", "exclusiveMinimum": 0},
          "span": {"type": "number", "minimum": -3, "exclusiveMaximum": 7},
          "neg": {"type": "number", "maximum": -2, "exclusiveMinimum": -4},
          "either": {"type": ["integer", "null"], "minimum": 1, "maximum": 12},
          "tight": {"type": "number", "minimum": 5, "exclusiveMinimum": 5, "maximum": 6},
          "counts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}},
          "closed": {"type": "object", "additionalProperties": false}},
          "required": ["age", "below", "big", "half", "unit", "pos", "span", "neg", "either", "tight", "counts",
                       "closed"]})",
  };
  return schemas;
}

}  // namespace

TEST_CASE("json_schema: random documents the matcher admits are valid for the jsonschema package (the peer)",
          "[structured][json_schema]") {
  std::mt19937 rng(7);
  ojson cases = ojson::array();
  size_t documents = 0;
  for (const std::string& text : peer_schemas()) {
    const auto schema = compiled(text);
    ojson c{{"schema", ojson::parse(text)}, {"documents", ojson::array()}};
    for (int i = 0; i < 60; ++i) {
      std::string doc = random_walk(*schema, rng, 20 + rng() % 120);
      // Bytes outside UTF-8 cannot reach the peer as JSON text: the matcher refuses them, so every walk is UTF-8.
      c["documents"].push_back(doc);
      ++documents;
    }
    cases.push_back(std::move(c));
  }
  const test::ReferenceRun run = test::run_reference("validate_json_schema.py", cases);
  INFO(run.report);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.report, Catch::Contains(std::to_string(documents) + " documents, 0 refused"));
}

TEST_CASE("json_schema: hand-written documents - order, required and optional properties, bounds, enums, refs",
          "[structured][json_schema]") {
  const auto person = compiled(peer_schemas()[0]);
  CHECK(admits(*person, R"({"name": "Lily", "age": 3, "ok": true})"));
  CHECK(admits(*person, R"({"name":"Li","age":-0,"score":1.5e3,"ok":false,"none":null})"));
  CHECK_FALSE(admits(*person, R"({"age": 3, "name": "Lily", "ok": true})"));       // out of the schema's order
  CHECK_FALSE(admits(*person, R"({"name": "Lily", "ok": true})"));                 // age is required
  CHECK_FALSE(admits(*person, R"({"name": "Lily", "age": 3.5, "ok": true})"));     // an integer
  CHECK_FALSE(admits(*person, R"({"name": "Lilyann", "age": 3, "ok": true})"));    // 7 characters, at most 6
  CHECK(admits(*person, R"({"name": "éé世界😀\n", "age": 3, "ok": true})"));       // characters, not bytes
  CHECK_FALSE(admits(*person, R"({"name": "Lily", "age": 3, "ok": true, "x": 1})"));  // no other keys
  CHECK_FALSE(admits(*person, R"({"name": "Lily", "age": "3", "ok": true})"));
  CHECK_FALSE(admits(*person, R"({"nam": "Lily", "age": 3, "ok": true})"));

  const auto tags = compiled(peer_schemas()[1]);
  CHECK(admits(*tags, R"({"tags": ["a"], "color": 10})"));
  CHECK(admits(*tags, R"({"tags": ["a", "bc", "def"], "color": 1, "unit": "kg"})"));
  CHECK(admits(*tags, R"({"tags": ["a"], "color": 1.5})"));
  CHECK_FALSE(admits(*tags, R"({"tags": [], "color": "red"})"));                  // minItems 1
  CHECK_FALSE(admits(*tags, R"({"tags": ["a", "b", "c", "d"], "color": "red"})")); // maxItems 3
  CHECK_FALSE(admits(*tags, R"({"tags": [""], "color": "red"})"));                // minLength 1
  CHECK_FALSE(admits(*tags, R"({"tags": ["a"], "color": 100})"));
  CHECK_FALSE(admits(*tags, R"({"tags": ["a"], "color": "blue"})"));
  CHECK_FALSE(admits(*tags, R"({"tags": ["a"], "color": "red", "unit": "g"})"));

  const auto tree = compiled(peer_schemas()[2]);
  CHECK(admits(*tree, R"({"root": {"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]}})"));
  CHECK_FALSE(admits(*tree, R"({"root": {"v": 1, "kids": [{"w": 2}]}})"));

  // A recursive reference as the only alternative is the schema, not a stand-in for it while it was built.
  const auto list = compiled(R"({"$defs": {"item": {"type": "object", "properties": {"v": {"type": "integer"},
      "next": {"anyOf": [{"$ref": "#/$defs/item"}]}}, "required": ["v"]}}, "type": "object",
      "properties": {"head": {"$ref": "#/$defs/item"}}, "required": ["head"]})");
  CHECK(admits(*list, R"({"head": {"v": 1, "next": {"v": 2}}})"));
  CHECK_FALSE(admits(*list, R"({"head": {"v": 1, "next": {"w": 2}}})"));

  const auto mixed = compiled(peer_schemas()[3]);
  CHECK(admits(*mixed, R"({"maybe": null, "many": 7, "free": {"any": [1, {"x": "y"}]}, "anything": [true]})"));
  CHECK(admits(*mixed, R"({"maybe": "abcd", "many": false, "free": {}, "quoted \"key\"é": "ab"})"));
  CHECK_FALSE(admits(*mixed, R"({"many": 1.5, "free": {}})"));
  CHECK_FALSE(admits(*mixed, R"({"maybe": "abcde", "free": {}})"));

  // json_object: any one object, as before.
  CHECK(admits(JsonSchema::any_object(), R"({"a": [1, "b", {"c": null}]})"));
  CHECK_FALSE(admits(JsonSchema::any_object(), R"([1])"));  // json_object: an object
}

TEST_CASE("json_schema: an array root, and objects told apart by their first property (a tagged union)",
          "[structured][json_schema]") {
  const auto calls = compiled(kToolCalls);
  CHECK(admits(*calls, R"([{"name": "get_weather", "parameters": {"city": "Paris"}}])"));
  CHECK(admits(*calls, R"([{"name": "add", "parameters": {"a": 1, "b": 2}}, null,)"
                       R"( {"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c"}}])"));
  CHECK_FALSE(admits(*calls, R"([{"name": "add", "parameters": {"city": "Paris"}}])"));  // add's parameters
  CHECK_FALSE(admits(*calls, R"([{"name": "get_weather", "parameters": {"a": 1, "b": 2}}])"));
  CHECK_FALSE(admits(*calls, R"([{"name": "mul", "parameters": {"a": 1, "b": 2}}])"));   // no such tag
  CHECK_FALSE(admits(*calls, R"([{"parameters": {"a": 1, "b": 2}, "name": "add"}])"));   // the tag comes first
  CHECK_FALSE(admits(*calls, R"([{"name": "add"}])"));                                   // parameters required
  CHECK_FALSE(admits(*calls, R"([])"));                                                  // minItems 1
  CHECK_FALSE(admits(*calls, R"({"name": "add"})"));                                     // the root is an array
  CHECK_FALSE(admits(*calls, R"([{"name": "get_weather", "parameters": {"city": "Paris"}, "x": 1}])"));
  // A tag's value whose alternative could not close within the nesting bound is not begun.
  const auto deep = compiled(R"({"$defs": {"n": {"type": "object", "properties": {"k": {"anyOf": [
      {"type": "object", "properties": {"t": {"const": "leaf"}}, "required": ["t"]},
      {"type": "object", "properties": {"t": {"const": "pair"}, "a": {"$ref": "#/$defs/n"}}, "required": ["t", "a"]}
      ]}}}}, "type": "object", "properties": {"r": {"$ref": "#/$defs/n"}}, "required": ["r"]})");
  JsonMatcher m(*deep);
  std::string text = R"({"r": )";
  for (int level = 0; level < 40; ++level) text += level % 2 == 0 ? R"({"k": )" : R"({"t": "pair", "a": )";
  size_t taken = 0;
  for (const char c : text) {
    if (!m.feed(static_cast<uint8_t>(c))) break;
    ++taken;
  }
  CHECK(taken < text.size());  // stopped where going deeper could not close
  CHECK(text.substr(taken, 4) != "leaf");
  CHECK_FALSE(bytes_taken(m).empty());  // and not stranded
  std::mt19937 rng(3);
  for (int i = 0; i < 20; ++i) CHECK(admits(*deep, random_walk(*deep, rng, 200 + rng() % 400)));
}

TEST_CASE("json matcher: what nlohmann cannot read is refused - lone surrogate escapes, exponents past 99 - and no "
          "byte leads nowhere (fuzz/corpus/json_schema/crash_*)",
          "[structured][json_schema][fuzz]") {
  const JsonSchema& any = JsonSchema::any_object();
  CHECK(admits(any, R"({"b": "\ud83d\ude00", "c": "\uD83D\uDE00x"})"));
  CHECK_FALSE(admits(any, R"({"a": "o\ude00"})"));     // a low surrogate alone
  CHECK_FALSE(admits(any, R"({"a": "\ud83d"})"));      // a high one without its low one
  CHECK_FALSE(admits(any, R"({"a": "\ud83dx"})"));
  CHECK_FALSE(admits(any, R"({"a": "\ud83d\u0041"})"));
  CHECK(admits(any, R"({"a": 1e99, "b": -2.5E-07})"));
  CHECK_FALSE(admits(any, R"({"a": 610e10717})"));      // nlohmann: number overflow
  // 31 bytes of number, then "e": no room for its exponent's digit, so the "e" is refused (the number can still end).
  JsonMatcher m;
  for (const char c : std::string(R"({"a": 1234567890123456789012345678901)"))
    REQUIRE(m.feed(static_cast<uint8_t>(c)));
  CHECK_FALSE(m.feed('e'));
  CHECK_FALSE(m.feed('.'));
  CHECK(m.feed('}'));
  CHECK(m.complete());
  // A string at its maximum length after a high surrogate's escape still takes the low one's.
  const auto two = compiled(R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 1}}})");
  CHECK(admits(*two, R"({"s": "\ud83d\ude00"})"));
  CHECK_FALSE(admits(*two, R"({"s": "\ud83d\ude00a"})"));
}

TEST_CASE("json_schema: near the nesting bound no byte leads nowhere - deep optional branches are not begun",
          "[structured][json_schema]") {
  // A list whose items each need 3 more levels ({"v": [[...]]}), under an optional recursive property.
  const auto schema = compiled(R"({"$defs": {"n": {"type": "object", "properties": {"v": {"type": "array",
      "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1}, "minItems": 1},
      "down": {"$ref": "#/$defs/n"}}, "required": ["v"]}}, "type": "object",
      "properties": {"top": {"$ref": "#/$defs/n"}}, "required": ["top"]})");
  std::mt19937 rng(3);
  for (int i = 0; i < 40; ++i) {  // random walks that go down as far as they may: each ends complete
    JsonMatcher m(*schema);
    std::string out;
    while (!m.complete()) {
      const std::vector<uint8_t> ok = bytes_taken(m);
      INFO(out);
      REQUIRE_FALSE(ok.empty());
      uint8_t pick = ok[rng() % ok.size()];
      for (const char c : std::string("d[1\",")) {  // down as far as it may go
        if (std::find(ok.begin(), ok.end(), static_cast<uint8_t>(c)) != ok.end()) {
          pick = static_cast<uint8_t>(c);
          break;
        }
      }
      if (out.size() > 2000 && std::find(ok.begin(), ok.end(), '}') != ok.end()) pick = '}';
      if (out.size() > 2000 && std::find(ok.begin(), ok.end(), ']') != ok.end()) pick = ']';
      REQUIRE(m.feed(pick));
      out.push_back(static_cast<char>(pick));
    }
    CHECK(ojson::parse(out).is_object());
  }
}

TEST_CASE("json_schema: schemas it cannot enforce are refused, naming the keyword and where it is",
          "[structured][json_schema]") {
  CHECK_THAT(compile_error(R"({"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 2}}})"),
             Catch::StartsWith("multipleOf is not supported; supported: ") && Catch::EndsWith("(at /properties/age)"));
  // Patterns, formats and bounds that cannot be enforced.
  CHECK_THAT(compile_error(R"({"type": "object", "properties": {"zip": {"type": "string", "pattern": "(\\d+"}}})"),
             Catch::StartsWith("pattern: regex: ") && Catch::EndsWith("(at /properties/zip/pattern)"));
  CHECK(compile_error(R"({"type": "object", "properties": {"c": {"type": "string", "pattern": "\\x01+"}}})") ==
        "pattern: regex: no text matches the pattern (at /properties/c/pattern)");  // not briefly escapable
  CHECK(compile_error(R"({"type": "object", "properties": {"u": {"type": "string", "format": "uri-reference"}}})") ==
        "format \"uri-reference\" is not supported; supported: date, date-time, duration, email, hostname, ipv4, "
        "ipv6, time, uri, uuid (at /properties/u/format)");
  CHECK(compile_error(R"({"type": "object", "properties": {"z": {"type": "string", "pattern": "(ab)+", "minLength": 3,
        "maxLength": 3}}})") == "pattern with minLength: regex: no text matches the pattern (at /properties/z)");
  CHECK(compile_error(R"({"type": "object", "properties": {"z": {"type": "string", "pattern": "(?:[a-z]{1,100}\\.)+",
        "minLength": 300}}})") ==
        "pattern with minLength: regex: the pattern with its minimum length needs more than 20000 DFA states (at "
        "/properties/z)");
  CHECK(compile_error(R"({"type": "object", "properties": {"z": {"pattern": "a+", "format": "date"}}})") ==
        "pattern beside format is not supported (at /properties/z)");
  CHECK(compile_error(R"({"type": "object", "properties": {"z": {"type": "string", "pattern": 5}}})") ==
        "pattern must be a string (at /properties/z/pattern)");
  CHECK(compile_error(R"({"type": "object", "properties": {"p": {"type": "number", "minimum": 0.5}}})") ==
        "minimum 0.5: the bounds of a number must be whole numbers (an integer's need not be) (at /properties/p)");
  CHECK(compile_error(R"({"type": "object", "properties": {"p": {"type": "integer", "minimum": 5, "maximum": 3}}})") ==
        "no integer lies within minimum and maximum (at /properties/p)");
  CHECK(compile_error(R"({"type": "object", "properties": {"p": {"type": "integer", "exclusiveMinimum": 2.5,
        "exclusiveMaximum": 3}}})") == "no integer lies within exclusiveMinimum and exclusiveMaximum (at /properties/p)");
  CHECK(compile_error(R"({"type": "object", "properties": {"p": {"type": "number", "exclusiveMinimum": 3,
        "maximum": 3}}})") == "no number lies within exclusiveMinimum and maximum (at /properties/p)");
  CHECK(compile_error(R"({"type": "object", "properties": {"p": {"oneOf": [{"type": "integer"},
        {"type": "number"}]}}})") == "an integer and a number alternative under oneOf are not supported (an integer "
                                    "matches both) (at /properties/p/oneOf)");
  CHECK(compile_error(R"({"type": "object", "properties": {"p": {"type": "number", "minimum": "0"}}})") ==
        "minimum must be a number (at /properties/p/minimum)");
  CHECK(compile_error(R"({"type": "object", "properties": {"p": {"type": "integer", "minimum": 1e16}}})") ==
        "minimum 10000000000000000 leaves no number of at most 15 digits (at /properties/p)");
  CHECK(compile_error(R"({"type": "string"})") == "the root must be an object or array schema (type object or array)");
  CHECK_THAT(compile_error(R"({"type": "object", "properties": {"a": {"anyOf": [
             {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]},
             {"type": "object", "properties": {"k": {"enum": [2, 1]}}, "required": ["k"]}]}}})"),
             Catch::StartsWith("the value 1 of \"k\" is in two alternatives: objects among alternatives must each "
                               "begin with the same required property"));
  CHECK_THAT(compile_error(R"({"type": "object", "properties": {"a": {"anyOf": [
             {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]},
             {"type": "object", "properties": {"j": {"const": 2}}, "required": ["j"]}]}}})"),
             Catch::StartsWith("alternative 1 of the objects begins with \"j\", not \"k\""));
  CHECK_THAT(compile_error(R"({"type": "object", "properties": {"a": {"anyOf": [
             {"type": "object", "properties": {"k": {"const": 1}}},
             {"type": "object", "properties": {"k": {"const": 2}}, "required": ["k"]}]}}})"),
             Catch::StartsWith("alternative 0 of the objects has no required first property"));
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})") ==
        "required names \"b\", which is not among the properties (at /required)");
  CHECK_THAT(compile_error(R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "object"},
             {"type": "object", "properties": {"x": {}}}]}}})"),
             Catch::StartsWith("alternative 0 of the objects has no required first property"));
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})") ==
        "$ref #/$defs/missing does not name a schema under #/$defs or #/definitions (at /properties/a/$ref)");
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {"type": "tuple"}}})") ==
        "unknown type \"tuple\" (at /properties/a/type)");
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {"enum": [[1]]}}})") ==
        "enum values must be strings, numbers, booleans or null (at /properties/a/enum)");
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 3,
        "maxLength": 2}}})") ==
        "minLength is larger than maxLength (at /properties/a)");
  CHECK(compile_error(R"({"type": "object", "properties": {"a": false}})") ==
        "a schema of false admits no value (at /properties/a)");
  CHECK_THAT(compile_error("{"), Catch::StartsWith("the schema is not valid JSON"));
  // Nothing beside enum / const or anyOf goes unenforced: refused, or (type beside enum) applied.
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {"enum": ["abcd"], "maxLength": 2}}})") ==
        "enum beside maxLength is not supported (at /properties/a)");
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}], "minLength": 2}}})") ==
        "anyOf beside minLength is not supported (at /properties/a)");
  CHECK(compile_error(R"({"type": "object", "properties": {"a": {"type": "integer", "enum": ["x", 1.5]}}})") ==
        "no enum value is of the type beside it (at /properties/a/enum)");
  const auto typed_enum =
      compiled(R"({"type": "object", "properties": {"a": {"type": "integer", "enum": [1, "1", 2.0]}}})");
  CHECK(admits(*typed_enum, R"({"a": 1})"));
  CHECK(admits(*typed_enum, R"({"a": 2.0})"));
  CHECK_FALSE(admits(*typed_enum, R"({"a": "1"})"));
  CHECK(compile_error(R"({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}},
        "required": ["next"]}}, "type": "object", "properties": {"head": {"$ref": "#/$defs/n"}},
        "required": ["head"]})") ==
        "the schema admits no document nested at most 32 levels deep (its required properties or items recurse)");
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += R"({"type": "object", "properties": {"a": )";
  deep += "{}" + std::string(80, '}');
  CHECK(compile_error(deep) == "the schema nests deeper than 64 levels");  // refused while parsed, never recursed
  // Boolean schemas, integer beside number, annotations.
  CHECK(compile_error(R"({"title": "t", "type": "object", "properties": {"a": true, "b": {"type": ["integer", "number"],
        "description": "d", "default": 1}}})") == "(compiled)");
}

TEST_CASE("json_schema: patterns and formats hold a string's decoded text, bounds a number's value",
          "[structured][json_schema]") {
  const auto zip = compiled(R"({"type": "object", "properties": {"zip": {"type": "string",
      "pattern": "^[0-9]{5}(-[0-9]{4})?$"}}, "required": ["zip"]})");
  CHECK(admits(*zip, R"({"zip": "12345"})"));
  // Lengths beside a pattern count the decoded text's characters (an escape is one, a UTF-8 character one).
  const auto sized = compiled(R"({"type": "object", "properties": {"w": {"type": "string", "pattern": "[a-zé\"]+",
      "minLength": 2, "maxLength": 3}}, "required": ["w"]})");
  for (const char* good : {R"({"w": "ab"})", R"({"w": "ééé"})", R"({"w": "a\"b"})", R"({"w": "\"\""})"}) {
    INFO(good);
    CHECK(admits(*sized, good));
  }
  for (const char* bad : {R"({"w": "a"})", R"({"w": "abcd"})", R"({"w": "éééé"})", R"({"w": "a\"bc"})"})
    CHECK_FALSE(admits(*sized, bad));
  CHECK(admits(*zip, R"({"zip": "12345-6789"})"));
  for (const char* bad : {R"({"zip": "1234"})", R"({"zip": "123456"})", R"({"zip": "12345-"})", R"({"zip": 12345})"})
    CHECK_FALSE(admits(*zip, bad));

  // Escapes are decoded before the regex reads them; \uXXXX is never taken, a raw quote or control never.
  const auto quoted = compiled(R"~({"type": "object", "properties": {"q": {"type": "string",
      "pattern": "a\"b/c\\\\d\\n"}}, "required": ["q"]})~");
  CHECK(admits(*quoted, R"~({"q": "a\"b/c\\d\n"})~"));
  CHECK(admits(*quoted, R"~({"q": "a\"b\/c\\d\n"})~"));
  CHECK_FALSE(admits(*quoted, R"~({"q": "a\u0022b/c\\d\n"})~"));
  CHECK_FALSE(admits(*quoted, "{\"q\": \"a\\\"b/c\\\\d\n\"}"));  // a raw newline
  JsonMatcher escape(*quoted);
  for (const char c : std::string(R"({"q": "a)")) REQUIRE(escape.feed(static_cast<uint8_t>(c)));
  CHECK_FALSE(escape.feed('"'));  // the regex wants a quote: only its escape writes it here
  CHECK(escape.feed('\\'));
  CHECK_FALSE(escape.feed('n'));  // an escape of another character than the one due
  CHECK(escape.feed('"'));

  const auto dates = compiled(R"({"type": "object", "properties": {"d": {"format": "date"},
      "t": {"type": "string", "format": "date-time"}}, "required": ["d"]})");
  CHECK(admits(*dates, R"({"d": "2024-02-29"})"));
  CHECK(admits(*dates, R"({"d": "2000-02-29", "t": "1999-12-31T23:59:59.5+01:00"})"));
  for (const char* bad : {R"({"d": "2023-02-29"})", R"({"d": "1900-02-29"})", R"({"d": "2023-04-31"})",
                          R"({"d": "0000-01-01"})", R"({"d": "2023-13-01"})", R"({"d": "2023-1-01"})",
                          R"({"d": "2024-01-01", "t": "2024-01-01T24:00:00Z"})",
                          R"({"d": "2024-01-01", "t": "2024-01-01T10:00:00"})"})
    CHECK_FALSE(admits(*dates, bad));

  const auto numbers = compiled(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0,
      "maximum": 120}, "unit": {"type": "number", "minimum": 0, "maximum": 1}, "pos": {"type": "number",
      "exclusiveMinimum": 0}}})");
  for (const char* good : {R"({"age": 0})", R"({"age": 120})", R"({"age": 7, "unit": 0.25})", R"({"unit": 1.000})",
                           R"({"unit": 0})", R"({"pos": 0.001})", R"({"pos": 12345.5})"})
    CHECK(admits(*numbers, good));
  for (const char* bad : {R"({"age": 121})", R"({"age": -1})", R"({"age": 007})", R"({"age": 1.0})",
                          R"({"unit": 1.5})", R"({"unit": -0.1})", R"({"unit": 1e0})", R"({"unit": 1.01})",
                          R"({"pos": 0})", R"({"pos": 0.0})", R"({"pos": -3})"})
    CHECK_FALSE(admits(*numbers, bad));
  // Objects without properties (a dict): any keys, their values of additionalProperties' schema; none when it is
  // false.
  const auto dicts = compiled(R"({"type": "object", "properties": {"d": {"type": "object",
      "additionalProperties": {"type": "integer", "minimum": 0}}, "e": {"type": "object",
      "additionalProperties": false}}})");
  CHECK(admits(*dicts, R"({"d": {"a": 1, "b": 20}, "e": {}})"));
  CHECK(admits(*dicts, R"({"d": {}})"));
  CHECK_FALSE(admits(*dicts, R"({"d": {"a": -1}})"));
  CHECK_FALSE(admits(*dicts, R"({"d": {"a": "1"}})"));
  CHECK_FALSE(admits(*dicts, R"({"e": {"x": 1}})"));
  // A bounded number is told apart from other alternatives by the bytes its bounds allow first.
  const auto either = compiled(R"({"type": "object", "properties": {"v": {"type": ["integer", "null"],
      "minimum": 1}}, "required": ["v"]})");
  CHECK(admits(*either, R"({"v": null})"));
  CHECK(admits(*either, R"({"v": 3})"));
  CHECK_FALSE(admits(*either, R"({"v": -3})"));
  CHECK_FALSE(admits(*either, R"({"v": 0})"));
}

TEST_CASE("compile check: the front ends' compile of a response format - the compiler's message, or success, "
          "the same when remembered, from several threads", "[structured][json_schema]") {
  const std::string schema = R"({"type": "object", "properties": {"d": {"format": "date"}}})";
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) ok += structured::compiles(ResponseFormat::json_schema, schema).ok() ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == 200);
  for (int pass = 0; pass < 2; ++pass) {
    CHECK(structured::compiles(ResponseFormat::json_schema, R"({"type": "object", "properties": {"n": {"multipleOf": 2}}})")
              .error()
              .message.rfind("multipleOf is not supported", 0) == 0);
    CHECK(structured::compiles(ResponseFormat::regex, "[a-").error().message.rfind("regex: ", 0) == 0);
    CHECK(structured::compiles(ResponseFormat::grammar, "root ::= x").error().message ==
          "grammar: undefined rule x (line 1)");
    CHECK(structured::compiles(ResponseFormat::regex, "[a-z]+").ok());
    CHECK(structured::compiles(ResponseFormat::grammar, "root ::= \"x\"").ok());
  }
}

TEST_CASE("json_schema: token masks inside a key allow only the names' bytes", "[structured][json_schema]") {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  const auto vocab = structured::TokenVocabulary::from(*tok, 512);
  const auto schema =
      compiled(R"({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})");
  JsonMatcher m(*schema);
  for (const char c : std::string("{\"n")) REQUIRE(m.feed(static_cast<uint8_t>(c)));
  CHECK(m.plain_text_room() < 0);
  std::vector<uint64_t> bits;
  structured::allowed_tokens(m, vocab, tok->stop_ids(), bits);
  int count = 0;
  for (int id = 0; id < vocab.size(); ++id) {
    if (!structured::allowed(bits, id)) continue;
    ++count;
    const std::string& b = vocab.bytes[static_cast<size_t>(id)];
    INFO(id << " " << b);
    CHECK(std::string("ame\":").rfind(b, 0) == 0);  // a prefix of what must follow
  }
  CHECK(count >= 1);
}

TEST_CASE("json_schema: token masks equal trying every token whole - keys, bounded strings, enums, integers",
          "[structured][json_schema]") {
  const auto schema = compiled(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
      "age": {"type": "integer"}, "color": {"enum": ["red", "green"]}, "note": {"type": "string", "minLength": 2},
      "day": {"type": "string", "format": "date"}, "count": {"type": "integer", "minimum": 10, "maximum": 250},
      "q": {"type": "string", "pattern": "[a-z\\\\\"]{0,3}"},
      "w": {"type": "string", "pattern": "[a-z ]+", "maxLength": 7}},
      "required": ["name", "age", "color"]})");
  const std::string gpt2 = (test::source_dir() / "tests/fixtures/tokenizers/gpt2").string();
  for (const std::string dir : {test::stories_dir().string(), gpt2}) {
    auto tok = Tokenizer::load(dir);
    REQUIRE(tok.ok());
    const auto vocab = structured::TokenVocabulary::from(*tok, tok->vocab_size());
    // The schema's cache (what a worker keeps per schema) gives the same masks, walked and then cached.
    const structured::MaskCache cache(vocab, std::make_shared<structured::MaskBudget>(int64_t{1} << 30));
    for (const std::string prefix : {"{", "{\"na", "{\"name\": \"", "{\"name\": \"Li", "{\"name\": \"Lily",
                                     "{\"name\": \"Lilyé", "{\"name\": \"a\", \"age\": 1",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"r",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"note\": \"x",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"day\": \"20",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"count\": 2",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"q\": \"a",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"q\": \"a\\",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"w\": \"",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"w\": \"a b",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"w\": \"a b c",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\", \"w\": \"a b c d",
                                     "{\"name\": \"a\", \"age\": 1, \"color\": \"red\"}"}) {
      INFO(dir << " after " << prefix);
      JsonMatcher m(*schema);
      for (const char c : prefix) REQUIRE(m.feed(static_cast<uint8_t>(c)));
      std::vector<uint64_t> bits;
      structured::allowed_tokens(m, vocab, tok->stop_ids(), bits);
      int differ = 0;
      for (int id = 0; id < vocab.size(); ++id) {
        JsonMatcher copy = m;
        const std::string& b = vocab.bytes[static_cast<size_t>(id)];
        bool whole = !b.empty();
        for (const char c : b) whole = whole && copy.feed(static_cast<uint8_t>(c));
        const bool stop = m.complete() && std::count(tok->stop_ids().begin(), tok->stop_ids().end(), id) > 0;
        differ += structured::allowed(bits, id) != (whole || stop);
      }
      CHECK(differ == 0);
      for (const char* pass : {"walked", "cached"}) {
        INFO(pass);
        std::vector<uint64_t> from_cache;
        structured::allowed_tokens(structured::OutputMatcher(m), vocab, tok->stop_ids(), from_cache, &cache);
        CHECK(from_cache == bits);
      }
    }
  }
}

namespace {

GenerateRequest schema_request(const std::string& schema, float temperature, uint64_t seed) {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  GenerateRequest r;
  r.prompt_ids = tok->encode("Once upon a time", true);
  r.max_tokens = 200;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.response_format = ResponseFormat::json_schema;
  r.sampling.json_schema = schema;
  return r;
}

}  // namespace

TEST_CASE("json_schema through the engine: every output is a document the schema admits, in a worker process "
          "too, and a schema it cannot enforce is refused",
          "[structured][json_schema][engine]") {
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
          "age": {"type": "integer", "minimum": 1, "maximum": 99}, "happy": {"type": "boolean"},
          "pet": {"enum": ["cat", "dog"]}, "code": {"type": "string", "pattern": "[A-Z]{2}-[0-9]{2}"}},
          "required": ["name", "age", "happy", "pet", "code"]})";
  std::vector<GenerateRequest> requests{schema_request(schema, 0.0f, 0)};
  for (uint64_t seed = 1; seed <= 5; ++seed) requests.push_back(schema_request(schema, 1.0f, seed));
  const auto compiled_schema = compiled(schema);
  auto check = [&](const std::vector<GenerateOutput>& out) {
    REQUIRE(out.size() == requests.size());
    for (const GenerateOutput& o : out) {
      INFO(o.text);
      REQUIRE_FALSE(o.error);
      CHECK(o.finish_reason == "stop");  // the schema bounds the object: it closes within max_tokens
      CHECK(admits(*compiled_schema, o.text));
      const ojson doc = ojson::parse(o.text);
      CHECK(doc.size() == 5);
      CHECK(doc["age"].is_number_integer());
      CHECK(doc["age"].get<int>() >= 1);
      CHECK(doc["age"].get<int>() <= 99);
      CHECK(doc["code"].get<std::string>().size() == 5);
    }
  };
  for (const char* config : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    INFO(config);
    auto engine = test::start_engine(test::quickstart(config));
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    check(*out);
  }
  auto engine = test::start_engine(test::quickstart());
  GenerateRequest bad = schema_request(R"({"type": "object", "properties": {"a": {"type": "string",
                                           "format": "uri-reference"}}})",
                                       0.0f, 0);
  auto refused = engine->generate({bad});
  REQUIRE(refused.ok());
  REQUIRE((*refused)[0].error);
  CHECK_THAT((*refused)[0].error->message, Catch::StartsWith("response_format: json_schema: format \"uri-reference\" is not supported"));
  auto still = engine->generate({requests[0]});  // the engine keeps serving
  REQUIRE(still.ok());
  CHECK((*still)[0].finish_reason == "stop");
}
