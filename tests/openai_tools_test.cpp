// Tool calling (api/openai_tools): tools and tool_choice checked with errors naming the field; the schemas the
// constrained choices generate under; the calls read back from each format's text, whole and streamed a byte at a
// time (which must agree); the format read from real chat templates.
#include "api/openai_tools.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "structured/json_matcher.hpp"
#include "structured/json_schema.hpp"
#include "test_util.hpp"

using namespace actord;
using ojson = nlohmann::ordered_json;

namespace {

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
   "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}])";

std::variant<ToolsRequest, ToolsError> read(const std::string& extra, bool renders = true,
                                            std::optional<ToolCallFormat> format = ToolCallFormat::hermes) {
  ojson body = ojson::parse(R"({"messages": []})");
  const ojson fields = ojson::parse(extra);
  for (const auto& [k, v] : fields.items()) body[k] = v;
  return read_tools(body, format, renders);
}

std::string error_of(const std::string& extra, bool renders = true,
                     std::optional<ToolCallFormat> format = ToolCallFormat::hermes) {
  auto r = read(extra, renders, format);
  if (auto* e = std::get_if<ToolsError>(&r)) return e->param + " | " + e->message;
  return "(read)";
}

ToolsRequest ok(const std::string& extra) {
  auto r = read(extra);
  if (auto* e = std::get_if<ToolsError>(&r)) FAIL(e->message);
  return std::get<ToolsRequest>(r);
}

bool admits(const std::string& schema_text, const std::string& doc) {
  auto schema = structured::JsonSchema::compile(schema_text);
  REQUIRE(schema.ok());
  structured::JsonMatcher m(**schema);
  for (const char c : doc)
    if (!m.feed(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

struct Read {
  std::string content;
  std::vector<ToolCall> calls;
};

// What a stream's deltas add up to: content, calls, and the arguments added to the last call.
void add(Read& r, const ToolCallReader::Delta& d) {
  r.content += d.content;
  r.calls.insert(r.calls.end(), d.calls.begin(), d.calls.end());
  if (!d.arguments.empty()) {
    REQUIRE_FALSE(r.calls.empty());
    r.calls.back().arguments += d.arguments;
  }
}

Read read_whole(const ToolUse& use, const std::string& text) {
  ToolCallReader reader(use);
  Read r;
  add(r, reader.push(text));
  add(r, reader.push("", true));
  return r;
}

// A byte at a time; content that went out before a call must never be taken back, so the pieces add up.
Read read_streamed(const ToolUse& use, const std::string& text) {
  ToolCallReader reader(use);
  Read r;
  for (const char c : text) add(r, reader.push(std::string(1, c)));
  add(r, reader.push("", true));
  return r;
}

// Reads `text` both ways and checks they agree; returns the whole read.
Read read_both(const ToolUse& use, const std::string& text) {
  const Read whole = read_whole(use, text), streamed = read_streamed(use, text);
  INFO(text);
  CHECK(streamed.content == whole.content);
  REQUIRE(streamed.calls.size() == whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    CHECK(streamed.calls[i].name == whole.calls[i].name);
    CHECK(streamed.calls[i].arguments == whole.calls[i].arguments);
  }
  for (const ToolCall& c : whole.calls) {
    CHECK(c.id.size() == 29);
    CHECK(c.id.rfind("call_", 0) == 0);
  }
  return whole;
}

ToolUse automatic(ToolCallFormat format, bool parallel = true) {
  ToolUse use;
  use.choice = ToolUse::Choice::automatic;
  use.format = format;
  use.parallel = parallel;
  return use;
}

}  // namespace

TEST_CASE("tools: tools and tool_choice are checked, each error naming its field", "[api][tools]") {
  const std::string tools = std::string(R"({"tools": )") + kTools;
  CHECK(error_of(R"({"tools": []})") == "tools | must be a non-empty list of tools");
  CHECK(error_of(R"({"tools": [{"type": "retrieval"}]})") ==
        "tools | tools[0] must be {\"type\": \"function\", \"function\": {...}}");
  CHECK(error_of(R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})") ==
        "tools | tools[0].function.name must be 1 to 64 letters, digits, '_' or '-', got 'a b'");
  CHECK(error_of(R"({"tools": [{"type": "function", "function": {"name": "a"}},
                              {"type": "function", "function": {"name": "a"}}]})") ==
        "tools | tools[1]: the name 'a' is given twice");
  CHECK(error_of(R"({"tools": [{"type": "function", "function": {"name": "a", "args": {}}}]})") ==
        "tools | tools[0].function.args: unknown field");
  CHECK(error_of(R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]})") ==
        "tools | tools[0].function.parameters must be a JSON schema (an object)");
  CHECK(error_of(R"({"tool_choice": "required"})") == "tool_choice | needs tools");
  CHECK(error_of(tools + R"(, "tool_choice": "sometimes"})") ==
        "tool_choice | must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  CHECK(error_of(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "mul"}}})") ==
        "tool_choice | names 'mul', which is not among the tools");
  CHECK(error_of(tools + R"(, "parallel_tool_calls": 1})") == "parallel_tool_calls | must be true or false");
  CHECK(error_of(tools + "}", false) ==
        "tools | the model's chat template does not render tools, so the model cannot see them");
  CHECK_THAT(error_of(tools + "}", true, std::nullopt),
             Catch::StartsWith("tools | the model's chat template writes no tool calls that actord can read"));
  // A schema the constrained choices cannot enforce is refused naming the tool; auto enforces nothing, so takes it.
  const std::string loose = R"({"tools": [{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}])";
  CHECK_THAT(error_of(loose + R"(, "tool_choice": "required"})"),
             Catch::StartsWith("tools | tools[0].function.parameters: multipleOf is not supported"));
  CHECK_THAT(error_of(loose + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})"),
             Catch::StartsWith("tools | tools[0].function.parameters: multipleOf is not supported"));
  CHECK(ok(loose + "}").use.choice == ToolUse::Choice::automatic);
  // Defaults: auto with tools, none without; none needs nothing of the template.
  CHECK(ok("{}").use.choice == ToolUse::Choice::none);
  CHECK(ok(tools + "}").use.choice == ToolUse::Choice::automatic);
  CHECK(ok(tools + R"(, "tool_choice": "none"})").use.choice == ToolUse::Choice::none);
  CHECK(std::get<ToolsRequest>(read(tools + R"(, "tool_choice": "none"})", false)).tools.size() == 2);
}

TEST_CASE("tools: named and required choices constrain the text to the tools' schemas", "[api][tools]") {
  const std::string tools = std::string(R"({"tools": )") + kTools;
  const ToolsRequest named = ok(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "add"}}})");
  CHECK(named.use.choice == ToolUse::Choice::named);
  CHECK(named.use.function == "add");
  CHECK(admits(named.schema, R"({"a": 1, "b": -2})"));
  CHECK_FALSE(admits(named.schema, R"({"a": 1})"));

  const ToolsRequest required = ok(tools + R"(, "tool_choice": "required"})");
  CHECK(admits(required.schema, R"([{"name": "add", "parameters": {"a": 1, "b": 2}}])"));
  CHECK(admits(required.schema, R"([{"name": "get_weather", "parameters": {"city": "Oslo"}}, )"
                                R"({"name": "add", "parameters": {"a": 1, "b": 2}}])"));
  CHECK_FALSE(admits(required.schema, R"([])"));
  CHECK_FALSE(admits(required.schema, R"([{"name": "add", "parameters": {"city": "Oslo"}}])"));
  CHECK_FALSE(admits(required.schema, R"([{"name": "mul", "parameters": {}}])"));
  const ToolsRequest single = ok(tools + R"(, "tool_choice": "required", "parallel_tool_calls": false})");
  CHECK_FALSE(admits(single.schema, R"([{"name": "add", "parameters": {"a": 1, "b": 2}}, )"
                                    R"({"name": "add", "parameters": {"a": 1, "b": 2}}])"));
  CHECK(admits(single.schema, R"([{"name": "add", "parameters": {"a": 1, "b": 2}}])"));

  // Tools with their own $defs: each tool's definitions keep to its own references at the combined schema's root.
  const ToolsRequest defs = ok(R"({"tool_choice": "required", "tools": [
      {"type": "function", "function": {"name": "f", "parameters": {"$defs": {"p": {"type": "integer"}},
       "type": "object", "properties": {"x": {"$ref": "#/$defs/p"}}, "required": ["x"]}}},
      {"type": "function", "function": {"name": "g", "parameters": {"definitions": {"p": {"type": "string"}},
       "type": "object", "properties": {"x": {"$ref": "#/definitions/p"}}, "required": ["x"]}}}]})");
  CHECK(admits(defs.schema, R"([{"name": "f", "parameters": {"x": 1}}, {"name": "g", "parameters": {"x": "y"}}])"));
  CHECK_FALSE(admits(defs.schema, R"([{"name": "f", "parameters": {"x": "y"}}])"));
  CHECK_FALSE(admits(defs.schema, R"([{"name": "g", "parameters": {"x": 1}}])"));

  // What the model writes under them reads back as calls.
  const Read n = read_both(named.use, R"( {"a": 1, "b": -2})");
  REQUIRE(n.calls.size() == 1);
  CHECK(n.calls[0].name == "add");
  CHECK(n.calls[0].arguments == R"( {"a": 1, "b": -2})");  // as the model writes them, streamed as they come
  ToolCallReader streaming(named.use);
  CHECK(streaming.push("").calls.empty());  // nothing yet: no call
  const ToolCallReader::Delta first = streaming.push(R"( {"a")");
  REQUIRE(first.calls.size() == 1);
  CHECK(first.calls[0].arguments == R"( {"a")");
  CHECK(streaming.push(": 1}", true).arguments == ": 1}");
  CHECK(n.content.empty());
  const Read r = read_both(required.use, R"([{"name": "get_weather", "parameters": {"city": "Oslo"}},
                                              {"name": "add", "parameters": {"a": 1, "b": 2}}])");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[0].arguments == R"({"city":"Oslo"})");
  CHECK(r.calls[1].arguments == R"({"a":1,"b":2})");
  CHECK(r.calls[0].id != r.calls[1].id);
  // Cut short (max_tokens): the text stays content.
  const Read cut = read_both(required.use, R"([{"name": "add", "param)");
  CHECK(cut.calls.empty());
  CHECK(cut.content == R"([{"name": "add", "param)");
}

TEST_CASE("tools: hermes calls read back whole and streamed alike", "[api][tools]") {
  const ToolUse use = automatic(ToolCallFormat::hermes);
  const Read a = read_both(use, "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
                                "\"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>");
  CHECK(a.content == "Let me check.");
  REQUIRE(a.calls.size() == 2);
  CHECK(a.calls[0].name == "get_weather");
  CHECK(a.calls[0].arguments == R"({"city":"Paris","unit":"c"})");
  CHECK(a.calls[1].name == "add");
  // parallel_tool_calls false: the first call only.
  CHECK(read_both(automatic(ToolCallFormat::hermes, false), "<tool_call>{\"name\": \"a\", \"arguments\": {}}"
                  "</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>").calls.size() == 1);
  // No call: the text as it is, whitespace included; text like a tag's start that is not one.
  CHECK(read_both(use, "Hello <tool there.\n\n").content == "Hello <tool there.\n\n");
  CHECK(read_both(use, "Hello <tool_call").content == "Hello <tool_call");
  // A call that does not parse stays text; one the model did not close is still read.
  const Read bad = read_both(use, "<tool_call>{\"name\": oops}</tool_call> and more");
  CHECK(bad.calls.empty());
  CHECK(bad.content == "<tool_call>{\"name\": oops}</tool_call> and more");
  const Read open = read_both(use, "<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}\n");
  REQUIRE(open.calls.size() == 1);
  CHECK(open.calls[0].arguments == R"({"a":1})");  // arguments given as JSON text are read as JSON too
  // Text after the calls: kept when not blank.
  CHECK(read_both(use, "<tool_call>{\"name\": \"a\"}</tool_call>\nDone.").content == "\nDone.");
}

TEST_CASE("tools: mistral and llama3_json calls, with and without their markers", "[api][tools]") {
  const ToolUse mistral = automatic(ToolCallFormat::mistral);
  const Read m = read_both(mistral, "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, "
                                    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]");
  REQUIRE(m.calls.size() == 2);
  CHECK(m.calls[1].arguments == R"({"city":"Oslo"})");
  CHECK(m.content.empty());
  CHECK(read_both(mistral, " [{\"name\": \"add\", \"arguments\": {}}]").calls.size() == 1);  // marker skipped
  CHECK(read_both(mistral, "[1, 2] are numbers").content == "[1, 2] are numbers");
  CHECK(read_both(mistral, "Sure: [TOOL_CALLS][{\"name\": \"add\"}]").content == "Sure:");  // blank before calls dropped

  const ToolUse llama = automatic(ToolCallFormat::llama3_json);
  const Read l = read_both(llama, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}; "
                                  "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a;b\"}}");
  REQUIRE(l.calls.size() == 2);
  CHECK(l.calls[0].arguments == R"({"a":1,"b":2})");
  CHECK(l.calls[1].arguments == R"({"city":"a;b"})");
  CHECK(read_both(llama, "<|python_tag|>{\"name\": \"add\", \"parameters\": {}}").calls.size() == 1);
  CHECK(read_both(llama, "The answer is {42}.").content == "The answer is {42}.");
  CHECK(read_both(llama, "{not json}").content == "{not json}");
  // Found by fuzz/openai_fuzz (crash_reader_leading_space): the whitespace before what looked like calls is kept.
  CHECK(read_both(llama, " {{m\"99es").content == " {{m\"99es");
  CHECK(read_both(mistral, "\n [x").content == "\n [x");
  // (crash_reader_marker_later) JSON at the start is read as the calls, whatever comes later: whole as in pieces.
  const std::string later = "{\"a\": 1} <|python_tag|>{\"name\": \"c\", \"parameters\": {}}";
  CHECK(read_both(llama, later).content == later);
}

TEST_CASE("tools: the call format is read from the chat template, or set", "[api][tools]") {
  const auto root = test::source_dir() / "tests/fixtures/chat_templates";
  auto format_of = [&](const char* name) {
    auto tpl = load_chat_template(root / name);
    REQUIRE(tpl.ok());
    auto f = tool_call_format("auto", &*tpl);
    REQUIRE(f.ok());
    return *f;
  };
  CHECK(format_of("qwen3") == ToolCallFormat::hermes);
  CHECK_FALSE(format_of("llama2").has_value());
  CHECK_FALSE(format_of("mistral_v1").has_value());
  auto set = tool_call_format("llama3_json", nullptr);
  REQUIRE(set.ok());
  CHECK(*set == ToolCallFormat::llama3_json);
  CHECK_FALSE(tool_call_format("xml", nullptr).ok());
  auto qwen = load_chat_template(root / "qwen3");
  REQUIRE(qwen.ok());
  CHECK(renders_tools(*qwen));
  auto llama2 = load_chat_template(root / "llama2");
  REQUIRE(llama2.ok());
  CHECK_FALSE(renders_tools(*llama2));
}

TEST_CASE("tools: assistant tool_calls' arguments reach the template as objects", "[api][tools]") {
  const ojson messages = ojson::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "add", "arguments": "{\"a\": 1}"}}, {"id": "call_2", "type": "function",
       "function": {"name": "add", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "1"}])");
  const ojson out = messages_for_template(messages);
  CHECK(out[1]["tool_calls"][0]["function"]["arguments"] == ojson{{"a", 1}});
  CHECK(out[1]["tool_calls"][1]["function"]["arguments"] == "not json");
  CHECK(out[2] == messages[2]);
}
