// ChatTemplate: real HF chat templates rendered byte-identically to transformers.js (fixtures in
// tests/fixtures/chat_templates/, see NOTICE.md there), Jinja semantics checks against jinja2 as HF configures it
// (trim_blocks, lstrip_blocks), and error reporting.
#include "tokenizer/chat_template.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using actord::ChatTemplate;
using actord::Errc;
using ojson = nlohmann::ordered_json;

std::string render(std::string_view tpl, const ojson& ctx = ojson::object()) {
  auto t = ChatTemplate::parse(tpl);
  if (!t.ok()) FAIL("parse failed: " << t.error().message);
  auto out = t->render(ctx);
  if (!out.ok()) FAIL("render failed: " << out.error().message);
  return *out;
}

actord::Error parse_error(std::string_view tpl) {
  auto t = ChatTemplate::parse(tpl);
  REQUIRE_FALSE(t.ok());
  return t.error();
}

actord::Error render_error(std::string_view tpl, const ojson& ctx = ojson::object()) {
  auto t = ChatTemplate::parse(tpl);
  REQUIRE(t.ok());
  auto out = t->render(ctx);
  REQUIRE_FALSE(out.ok());
  return out.error();
}

// Renders every case of one fixture folder (tokenizer_config.json + expected.json from make_fixtures.mjs).
void check_fixture_dir(const std::filesystem::path& dir) {
  nlohmann::json special;
  auto tpl = actord::load_chat_template(dir, &special);
  INFO("template " << dir.filename().string());
  if (!tpl.ok()) FAIL(tpl.error().message);
  std::ifstream in(dir / "expected.json");
  const ojson cases = ojson::parse(in);
  REQUIRE(cases.size() >= 5);
  for (const auto& c : cases) {
    INFO("case " << c.at("name").get<std::string>());
    // The context transformers.js' apply_chat_template builds: messages, add_generation_prompt, tools and
    // documents (null unless given), the special tokens, then the extra keyword arguments.
    ojson ctx;
    ctx["messages"] = c.at("messages");
    ctx["add_generation_prompt"] = c.at("add_generation_prompt");
    ctx["tools"] = nullptr;
    ctx["documents"] = nullptr;
    for (const auto& [k, v] : special.items()) ctx[k] = v;
    for (const auto& [k, v] : c.at("extra").items()) ctx[k] = v;
    auto out = tpl->render(ctx);
    if (c.contains("expected")) {
      if (!out.ok()) FAIL("render failed: " << out.error().message);
      CHECK(*out == c.at("expected").get<std::string>());
    } else {
      REQUIRE_FALSE(out.ok());
      CHECK(out.error().code == Errc::invalid_argument);
      CHECK(out.error().message == c.at("error").get<std::string>());
    }
  }
}

}  // namespace

TEST_CASE("chat templates render byte-identically to transformers.js", "[chat_template]") {
  const auto root = actord::test::source_dir() / "tests/fixtures/chat_templates";
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(root))
    if (e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  REQUIRE(names == std::vector<std::string>{"chatml_tools", "llama2", "mistral_v1", "qwen3"});
  for (const auto& n : names) check_fixture_dir(root / n);

  // Templates whose licence keeps them out of the repository (Llama 3 / 3.1, Gemma 3, DeepSeek V3): written by
  // `make_fixtures.mjs <scratch> <out> <extra-dir>`, checked when ACTORD_CHAT_TEMPLATE_EXTRA=<extra-dir>.
  if (const char* extra = std::getenv("ACTORD_CHAT_TEMPLATE_EXTRA")) {
    for (const auto& e : std::filesystem::directory_iterator(extra))
      if (e.is_directory()) check_fixture_dir(e.path());
  }
}

TEST_CASE("chat template whitespace follows trim_blocks and lstrip_blocks", "[chat_template]") {
  // Expected strings from jinja2 3.1 with trim_blocks=True, lstrip_blocks=True (HF's environment).
  const ojson ctx = {{"xs", {1, 2}}};
  CHECK(render("  {% for x in xs %}\n    {{ x }}\n  {% endfor %}\n", ctx) == "    1\n    2\n");
  CHECK(render("{%- for x in xs -%}\n  [{{- x -}}]  \n{%- endfor %}\nend\n\n", ctx) == "[1][2]end\n");
  CHECK(render("{# c #}\n  {# c2 #}  x\n{% if true %}\n   yes\n{% else %}\nno\n{% endif %}\n") == "  x\n   yes\n");
  CHECK(render("{% raw %}{{ not rendered }}{% endraw %}\n{%+ if true %}  kept{% endif %}") ==
        "{{ not rendered }}  kept");
  CHECK(render("a  {% if true %}b{% endif %}") == "a  b");  // lstrip only at the start of a line
  CHECK(render("line\r\n{{ 'x' }}\r\n") == "line\nx");      // newlines normalized, trailing one dropped
}

TEST_CASE("chat template expressions, filters and methods", "[chat_template]") {
  const ojson msgs = ojson::parse(
      R"([{"role":"system","content":"Be nice."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}])");
  const ojson ctx = {{"messages", msgs}};
  // All expected strings checked with jinja2 3.1 in HF's environment.
  CHECK(render("{{ 'a' ~ 1 ~ none ~ true }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|"
               "{{ 2 ** 10 }}|{{ 1.5 + 1 }}|{{ 10 / 4 }}") == "a1NoneTrue|5.0|3|-4|2|1024|2.5|2.5");
  CHECK(render("{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.first }}/"
               "{{ loop.last }}:{{ m.role }};{% endfor %}",
               ctx) == "1/0/3/True/False:system;2/1/3/False/False:user;3/2/3/False/True:assistant;");
  CHECK(render("{% set ns = namespace(x=0, s='') %}{% for m in messages %}{% set ns.x = ns.x + 1 %}"
               "{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.x }}{{ ns.s }}",
               ctx) == "3sua");
  CHECK(render("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i + 5 %}{{ x }},{% endfor %}{{ x }}") ==
        "05,06,07,0");
  CHECK(render("{{ messages[1:] | length }}{{ (messages[::-1] | first).role }}{{ messages[-1].role }}"
               "{{ 'hello'[1:3] }}{{ 'héllo'[::-1] }}{{ [1,2,3,4][::2] }}",
               ctx) == "2assistantassistantelolléh[1, 3]");
  CHECK(render("{{ messages | map(attribute='role') | join(', ') }}|"
               "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|"
               "{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list }}",
               ctx) == "system, user, assistant|1|['system', 'assistant']");
  CHECK(render("{{ {'a': 1, 'b': [1, 2.5, none, true, 'x\"y'], 'c': {'d': 'é\\n'}} | tojson }}|"
               "{{ [1, {'k': 'v'}] | tojson(indent=2) }}|{{ {} | tojson }}") ==
        "{\"a\": 1, \"b\": [1, 2.5, null, true, \"x\\\"y\"], \"c\": {\"d\": \"é\\n\"}}|"
        "[\n  1,\n  {\n    \"k\": \"v\"\n  }\n]|{}");
  CHECK(render("{{ '  abc  '.strip() }}|{{ 'xxabcxx'.strip('x') }}|{{ ' a b  c '.split() }}|"
               "{{ 'a,b,,c'.split(',') }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|{{ 'hello wORLD'.title() }}|"
               "{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aaa'.replace('a', 'b', 2) }}|"
               "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}") ==
        "abc|abc|['a', 'b', 'c']|['a', 'b', '', 'c']|HELLOhello|Hello World|Hello World|Hello|bba|TrueTrue");
  CHECK(render("{{ x }}|{{ x is defined }}|{{ x is not defined }}|{{ none is none }}|{{ 'a' is string }}|"
               "{{ {} is mapping }}|{{ [] is iterable }}|{{ 1.5 is number }}|{{ x | default('dflt') }}|"
               "{{ none | default('d') }}|{{ '' | default('e', true) }}") ==
        "|False|True|True|True|True|True|True|dflt|None|e");
  CHECK(render("{{ 'a' if x else 'b' }}|{{ 'a' if true }}|{{ 1 in [1,2] }}{{ 'b' in 'abc' }}{{ 'k' in {'k':1} }}"
               "{{ 3 not in [1] }}|{{ not true or false and true }}|{{ 1 < 2 < 3 }}{{ 1 == 1.0 }}") ==
        "b|a|TrueTrueTrueTrue|False|TrueTrue");
  CHECK(render("{% set d = {'b': 2, 'a': 1} %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
               "{{ d.keys() | list }}{{ d.values() | list }}{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 9) }}"
               "{{ d | items | list }}") == "b=2;a=1;['b', 'a'][2, 1]1None9[('b', 2), ('a', 1)]");
  CHECK(render("{% macro fmt(m, sep=': ') %}{{ m.role }}{{ sep }}{{ m.content | trim }}{% endmacro %}"
               "{% for m in messages %}{{ fmt(m) }}|{{ fmt(m, sep='=') }};{% endfor %}",
               ctx) == "system: Be nice.|system=Be nice.;user: Hi|user=Hi;assistant: Hello!|assistant=Hello!;");
  CHECK(render("{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"
               "{% for i in range(1, 10, 3) %}{{ i }}{% if i > 3 %}{% break %}{% endif %}{% endfor %}"
               "{% for x in [] %}a{% else %}empty{% endfor %}") == "0214empty");
  CHECK(render("{{ [3,1,2] | sort }}{{ [3,1,2] | max }}{{ [1,1,2] | unique | list }}{{ 'abc' | list }}"
               "{{ 42 | string }}{{ '42' | int + 1 }}{{ '4.7' | int }}{{ 'x' | int }}{{ '2.5' | float }}"
               "{{ [1,2,3] | sum }}{{ [1,2] | last }}{{ -3 | abs }}") == "[1, 2, 3]3[1, 2]['a', 'b', 'c']4243402.5623");
  CHECK(render("{{ 'line1\\nline2\\n\\nline3' | indent(2) }}|{{ 'a\\nb' | indent(4, true) }}") ==
        "line1\n  line2\n\n  line3|    a\n    b");
  CHECK(render("{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]{% set a, b = [1, 2] %}{{ a }}{{ b }}") ==
        "[inner 2]12");
  CHECK(render("{{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 1e20 * 10 }} {{ 1.5e-7 }} {{ 3.0 }}") ==
        "1000.0 0.30000000000000004 0.3333333333333333 1e+21 1.5e-07 3.0");
  CHECK(render("{{ [1, 'a', none, true, {'k': \"v's\"}] }} {{ (1, 2) }}") ==
        "[1, 'a', None, True, {'k': \"v's\"}] (1, 2)");
  CHECK(render("{{ 'a\\tb\\u00e9\\x41' }}|{{ \"x\" \"y\" }}|{{ 'é✓'|length }}|{{ 'abc'[-1] }}") == "a\tbéA|xy|2|c");
  CHECK(render("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{% endfor %}", ctx) ==
        "1user2assistant");
  CHECK(render("{{ '\\n'.join(['a','b']) }}|{{ 'abcb'.find('b') }}{{ 'abcb'.rfind('b') }}{{ 'abcb'.count('b') }}|"
               "{{ 'a\\nb\\r\\nc'.splitlines() }}") == "a\nb|132|['a', 'b', 'c']");
  CHECK(render("{{ strftime_now('%Y') | length }}") == "4");
}

TEST_CASE("chat template errors", "[chat_template]") {
  SECTION("an unsupported filter is named with its line") {
    const auto e = parse_error("{{ 'a' }}\n\n{{ messages | tojson_pretty }}");
    CHECK(e.code == Errc::unsupported);
    CHECK(e.message == "chat_template line 3: filter 'tojson_pretty' is not supported");
  }
  SECTION("unsupported tags, tests, methods and functions") {
    CHECK(parse_error("{% include 'x.j2' %}").message == "chat_template line 1: tag 'include' is not supported");
    CHECK(parse_error("{{ x is prime }}").message == "chat_template line 1: test 'prime' is not supported");
    CHECK(parse_error("{{ x.frobnicate() }}").message == "chat_template line 1: method 'frobnicate' is not supported");
    CHECK(parse_error("\n{{ lipsum(2) }}").message == "chat_template line 2: function 'lipsum' is not supported");
    CHECK(parse_error("{{ x.frobnicate() }}").code == Errc::unsupported);
  }
  SECTION("syntax errors name the line") {
    auto e = parse_error("{% for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}");
    CHECK(e.code == Errc::parse_error);
    CHECK(e.message.rfind("chat_template line 3: ", 0) == 0);
    e = parse_error("a\nb\n{% for m in messages %}{{ m }}");
    CHECK(e.code == Errc::parse_error);
    CHECK(e.message == "chat_template line 3: unexpected end of template, expected 'endfor'");
    CHECK(parse_error("{{ (1 + 2 }}").code == Errc::parse_error);
    CHECK(parse_error("{{ 'abc }}").code == Errc::parse_error);
    CHECK(parse_error("{% frobnicate %}").message == "chat_template line 1: unknown tag 'frobnicate'");
    CHECK(parse_error("{% break %}").code == Errc::parse_error);
    CHECK(parse_error("{{ " + std::string(5000, '(') + " }}").code ==
          Errc::parse_error);  // nesting limit, no stack overflow
  }
  SECTION("raise_exception surfaces its message") {
    const auto e =
        render_error("{% if messages | length > 1 %}{{ raise_exception('Only ' ~ 1 ~ ' message!') }}{% endif %}",
                     {{"messages", {1, 2}}});
    CHECK(e.code == Errc::invalid_argument);
    CHECK(e.message == "Only 1 message!");
  }
  SECTION("runtime errors are values with the line") {
    auto e = render_error("\n{{ x + 1 }}");
    CHECK(e.code == Errc::invalid_argument);
    CHECK(e.message == "chat_template line 2: 'x' is undefined");
    CHECK(render_error("{{ 'a' + 1 }}").message ==
          "chat_template line 1: unsupported operand type(s) for +: 'str' and 'int'");
    CHECK(render_error("{{ 1 // 0 }}").code == Errc::invalid_argument);
    CHECK(render_error("{% for x in 3 %}{% endfor %}").code == Errc::invalid_argument);
    CHECK(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").code == Errc::invalid_argument);
    CHECK(render_error("{{ range(100000000) | length }}").code == Errc::invalid_argument);
  }
}

TEST_CASE("load_chat_template reads tokenizer_config.json", "[chat_template]") {
  actord::test::TempDir dir;
  SECTION("no template") {
    actord::test::write_file(dir.path() / "tokenizer_config.json", R"({"bos_token": "<s>"})");
    auto t = actord::load_chat_template(dir.path());
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().code == Errc::not_found);
  }
  SECTION("list form picks default, special tokens as strings or AddedToken") {
    actord::test::write_file(dir.path() / "tokenizer_config.json", R"({
      "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
      "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}hi{{ eos_token }}"}]})");
    nlohmann::json special;
    auto t = actord::load_chat_template(dir.path(), &special);
    REQUIRE(t.ok());
    CHECK(special == nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    auto out = t->render(special);
    REQUIRE(out.ok());
    CHECK(*out == "<s>hi</s>");
  }
  SECTION("malformed json and missing folder") {
    actord::test::write_file(dir.path() / "tokenizer_config.json", "{not json");
    CHECK(actord::load_chat_template(dir.path()).error().code == Errc::parse_error);
    CHECK(actord::load_chat_template(dir.path() / "nope").error().code == Errc::not_found);
  }
}
