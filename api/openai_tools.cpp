#include "api/openai_tools.hpp"

#include <algorithm>
#include <cctype>
#include <random>
#include <set>

#include "api/text_marks.hpp"
#include "structured/json_schema.hpp"

namespace actord {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

std::string new_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  return id;
}

std::optional<ojson> parse_json(std::string_view text) {
  ojson v = ojson::parse(text, nullptr, false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

// The top-level JSON values of `text` separated by ';' (llama3_json's several calls), split outside strings.
std::vector<std::string_view> split_values(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ';' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(text.substr(start));
  return parts;
}

// Renames a tool's "#/$defs/X" (or definitions) references to "#/$defs/<prefix>X", so that its definitions can join
// others' at the root of a schema built around it.
void prefix_refs(ojson& schema, const std::string& prefix) {
  if (schema.is_object()) {
    for (auto& [key, value] : schema.items()) {
      if (key == "$ref" && value.is_string()) {
        std::string ref = value.get<std::string>();
        for (const std::string section : {"#/$defs/", "#/definitions/"})
          if (ref.rfind(section, 0) == 0) ref = "#/$defs/" + prefix + ref.substr(section.size());
        value = ref;
      } else {
        prefix_refs(value, prefix);
      }
    }
  } else if (schema.is_array()) {
    for (auto& v : schema) prefix_refs(v, prefix);
  }
}

struct Tool {
  std::string name;
  ojson parameters;  // {"type": "object"} when the tool gives none
};

}  // namespace

Result<std::optional<ToolCallFormat>> tool_call_format(std::string_view setting, const ChatTemplate* chat_template) {
  if (setting == "hermes") return std::optional<ToolCallFormat>(ToolCallFormat::hermes);
  if (setting == "mistral") return std::optional<ToolCallFormat>(ToolCallFormat::mistral);
  if (setting == "llama3_json") return std::optional<ToolCallFormat>(ToolCallFormat::llama3_json);
  if (setting != "auto")
    return make_error(Errc::invalid_argument, "server.tool_call_parser: must be auto, hermes, mistral or llama3_json, "
                                              "got '" + std::string(setting) + "'");
  if (!chat_template) return std::optional<ToolCallFormat>();
  const std::string& source = chat_template->source();
  if (source.find(kHermesOpen) != std::string::npos) return std::optional<ToolCallFormat>(ToolCallFormat::hermes);
  if (source.find(kMistralMarker) != std::string::npos) return std::optional<ToolCallFormat>(ToolCallFormat::mistral);
  if (source.find(kPythonTag) != std::string::npos || source.find("\"parameters\": ") != std::string::npos)
    return std::optional<ToolCallFormat>(ToolCallFormat::llama3_json);
  return std::optional<ToolCallFormat>();
}

bool renders_tools(const ChatTemplate& chat_template) {
  return chat_template.source().find("tools") != std::string::npos;
}

std::variant<ToolsRequest, ToolsError> read_tools(const ojson& body, std::optional<ToolCallFormat> format,
                                                  bool template_renders_tools) {
  ToolsRequest out;
  std::vector<Tool> tools;
  if (body.contains("tools") && !body["tools"].is_null()) {
    const ojson& list = body["tools"];
    if (!list.is_array() || list.empty()) return ToolsError{"tools", "must be a non-empty list of tools"};
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      const ojson& t = list[i];
      if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") ||
          !t["function"].is_object())
        return ToolsError{"tools", at + " must be {\"type\": \"function\", \"function\": {...}}"};
      for (const auto& [key, value] : t.items())
        if (key != "type" && key != "function") return ToolsError{"tools", at + "." + key + ": unknown field"};
      const ojson& f = t["function"];
      for (const auto& [key, value] : f.items())
        if (key != "name" && key != "description" && key != "parameters" && key != "strict")
          return ToolsError{"tools", at + ".function." + key + ": unknown field"};
      if (!f.contains("name") || !f["name"].is_string())
        return ToolsError{"tools", at + ".function.name must be a string"};
      const std::string name = f["name"].get<std::string>();
      const bool valid_name = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      });
      if (!valid_name)
        return ToolsError{"tools",
                          at + ".function.name must be 1 to 64 letters, digits, '_' or '-', got '" + name + "'"};
      if (!names.insert(name).second) return ToolsError{"tools", at + ": the name '" + name + "' is given twice"};
      if (f.contains("description") && !f["description"].is_string())
        return ToolsError{"tools", at + ".function.description must be a string"};
      if (f.contains("strict") && !f["strict"].is_boolean() && !f["strict"].is_null())
        return ToolsError{"tools", at + ".function.strict must be a boolean"};
      ojson parameters = ojson{{"type", "object"}};
      if (f.contains("parameters") && !f["parameters"].is_null()) {
        if (!f["parameters"].is_object())
          return ToolsError{"tools", at + ".function.parameters must be a JSON schema (an object)"};
        parameters = f["parameters"];
      }
      tools.push_back({name, std::move(parameters)});
    }
    out.tools = list;
  }

  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean()) return ToolsError{"parallel_tool_calls", "must be true or false"};
    out.use.parallel = body["parallel_tool_calls"].get<bool>();
  }
  using Choice = ToolUse::Choice;
  out.use.choice = tools.empty() ? Choice::none : Choice::automatic;
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    if (c == "none") {
      out.use.choice = Choice::none;
    } else if (c == "auto" || c == "required") {
      out.use.choice = c == "auto" ? Choice::automatic : Choice::required;
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") && c["function"]["name"].is_string()) {
      out.use.choice = Choice::named;
      out.use.function = c["function"]["name"].get<std::string>();
    } else {
      return ToolsError{"tool_choice",
                        "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}"};
    }
    if (out.use.choice != Choice::none && tools.empty()) return ToolsError{"tool_choice", "needs tools"};
  }
  if (out.use.choice == Choice::none) return out;
  if (!template_renders_tools)
    return ToolsError{"tools", "the model's chat template does not render tools, so the model cannot see them"};
  if (out.use.choice == Choice::automatic) {
    if (!format)
      return ToolsError{"tools", "the model's chat template writes no tool calls that actord can read: set "
                                 "server.tool_call_parser (hermes, mistral or llama3_json) or use tool_choice "
                                 "required or a named function"};
    out.use.format = *format;
    return out;
  }

  // Constrained: the named tool's parameters, or a list of calls of any of the tools.
  auto compile_check = [&](const std::string& schema, const std::string& at) -> std::optional<ToolsError> {
    if (auto compiled = structured::JsonSchema::compile(schema); !compiled)
      return ToolsError{"tools", at + ".function.parameters: " + compiled.error().message};
    return std::nullopt;
  };
  if (out.use.choice == Choice::named) {
    auto it = std::find_if(tools.begin(), tools.end(), [&](const Tool& t) { return t.name == out.use.function; });
    if (it == tools.end())
      return ToolsError{"tool_choice", "names '" + out.use.function + "', which is not among the tools"};
    out.schema = it->parameters.dump();
    if (auto e = compile_check(out.schema, "tools[" + std::to_string(it - tools.begin()) + "]")) return *e;
    return out;
  }
  ojson alternatives = ojson::array(), defs = ojson::object();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (auto e = compile_check(tools[i].parameters.dump(), at)) return *e;  // errors named as the tool writes them
    ojson parameters = tools[i].parameters;
    const std::string prefix = "tool" + std::to_string(i) + "_";
    prefix_refs(parameters, prefix);
    for (const char* section : {"$defs", "definitions"}) {
      if (!parameters.contains(section)) continue;
      for (auto& [name, def] : parameters[section].items()) defs[prefix + name] = def;
      parameters.erase(section);
    }
    alternatives.push_back(ojson{{"type", "object"},
                                 {"properties", {{"name", {{"const", tools[i].name}}}, {"parameters", parameters}}},
                                 {"required", {"name", "parameters"}},
                                 {"additionalProperties", false}});
  }
  ojson schema{{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", alternatives}}}};
  if (!out.use.parallel) schema["maxItems"] = 1;
  if (!defs.empty()) schema["$defs"] = defs;
  out.schema = schema.dump();
  if (auto compiled = structured::JsonSchema::compile(out.schema); !compiled)
    return ToolsError{"tools", "tool_choice required: " + compiled.error().message};
  return out;
}

ojson messages_for_template(const ojson& messages) {
  ojson out = messages;
  for (ojson& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (ojson& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      ojson& f = call["function"];
      if (!f.contains("arguments") || !f["arguments"].is_string()) continue;
      auto parsed = parse_json(f["arguments"].get<std::string>());
      if (parsed && parsed->is_object()) f["arguments"] = *parsed;
    }
  }
  return out;
}

ToolCallReader::ToolCallReader(const ToolUse& use) : use_(use) {}

std::optional<std::vector<ToolCall>> ToolCallReader::parse_calls(std::string_view json_text) const {
  // One call {"name", "arguments" | "parameters"} or a list of them.
  auto call_of = [](const ojson& v) -> std::optional<ToolCall> {
    if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return std::nullopt;
    const char* key = v.contains("arguments") ? "arguments" : v.contains("parameters") ? "parameters" : nullptr;
    ToolCall call{new_call_id(), v["name"].get<std::string>(), "{}"};
    if (key) {
      const ojson& a = v[key];
      if (a.is_string()) {
        auto parsed = parse_json(a.get<std::string>());
        call.arguments = parsed ? parsed->dump() : a.get<std::string>();
      } else {
        call.arguments = a.dump();
      }
    }
    return call;
  };
  std::vector<ToolCall> calls;
  const std::vector<std::string_view> parts =
      use_.format == ToolCallFormat::llama3_json ? split_values(json_text) : std::vector<std::string_view>{json_text};
  for (std::string_view part : parts) {
    if (blank(part)) continue;
    auto v = parse_json(part);
    if (!v) return std::nullopt;
    if (v->is_array()) {
      for (const ojson& e : *v) {
        auto call = call_of(e);
        if (!call) return std::nullopt;
        calls.push_back(std::move(*call));
      }
    } else {
      auto call = call_of(*v);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

void ToolCallReader::read_calls(Delta& out, bool at_end) {
  // Content goes out at once until a call has been read, but for whitespace at its end, which waits for the text
  // after it (and is dropped before a call); after a call, content waits for the end and goes out if not blank.
  auto give = [&](std::string_view text) {
    if (!blank(text)) at_start_ = false;
    if (calls_read_ > 0) {
      after_calls_ += text;
      return;
    }
    unsent_ += text;
    size_t end = unsent_.size();
    while (end > 0 && std::isspace(static_cast<unsigned char>(unsent_[end - 1]))) --end;
    out.content += unsent_.substr(0, end);
    unsent_.erase(0, end);
  };
  auto add = [&](std::vector<ToolCall> calls) {
    for (ToolCall& c : calls) {
      if (!use_.parallel && calls_read_ > 0) break;  // parallel_tool_calls false: the first call only
      out.calls.push_back(std::move(c));
      ++calls_read_;
      unsent_.clear();
    }
  };

  if (use_.choice == ToolUse::Choice::named) {  // the text is the call's arguments: they stream as they come
    if (held_.empty() && !at_end) return;
    if (calls_read_ == 0) add({ToolCall{new_call_id(), use_.function, held_}});
    else out.arguments += held_;
    held_.clear();
  } else if (use_.choice == ToolUse::Choice::required) {
    if (!at_end) return;
    if (auto calls = parse_calls(held_)) {
      add(std::move(*calls));
    } else {
      give(held_);  // cut short (finish_reason length): the text as it is
    }
    held_.clear();
  } else if (use_.format == ToolCallFormat::hermes) {
    for (;;) {
      if (!in_calls_) {
        const size_t open = held_.find(kHermesOpen);
        if (open == std::string::npos) {
          const size_t keep = at_end ? 0 : partial_mark(held_, kHermesOpen);
          give(std::string_view(held_).substr(0, held_.size() - keep));
          held_.erase(0, held_.size() - keep);
          break;
        }
        give(std::string_view(held_).substr(0, open));
        held_.erase(0, open + kHermesOpen.size());
        in_calls_ = true;
      }
      const size_t close = held_.find(kHermesClose);
      if (close == std::string::npos && !at_end) break;
      const std::string_view inner = std::string_view(held_).substr(0, close);
      const std::string_view close_tag = close == std::string::npos ? std::string_view() : kHermesClose;
      if (auto calls = parse_calls(inner)) add(std::move(*calls));
      else give(std::string(kHermesOpen).append(inner).append(close_tag));  // not a call: the text as it is
      held_.erase(0, close == std::string::npos ? held_.size() : close + kHermesClose.size());
      in_calls_ = false;
      if (held_.empty()) break;
    }
  } else {  // mistral, llama3_json: calls at the text's start (or after its marker) run to its end
    const std::string_view marker = use_.format == ToolCallFormat::mistral ? kMistralMarker : kPythonTag;
    const char opener = use_.format == ToolCallFormat::mistral ? '[' : '{';
    if (!in_calls_) {
      const size_t start = first_non_space(held_);
      const std::string_view rest = std::string_view(held_).substr(start);
      const size_t found = held_.find(marker);
      if (at_start_ && rest.rfind(marker, 0) == 0) {
        in_calls_ = true;  // the marker first: the rest is calls
      } else if (at_start_ && !at_end && marker.substr(0, rest.size()) == rest) {
        return;  // only whitespace, or the start of the marker, so far: a call may still begin
      } else if (at_start_ && !rest.empty() && rest[0] == opener) {
        in_calls_ = true;  // (the whitespace before stays: it is content if these are not calls)
      } else if (found != std::string::npos) {
        give(std::string_view(held_).substr(0, found));
        held_.erase(0, found);  // the marker stays in held_ until the calls parse
        in_calls_ = true;
      } else {
        const size_t keep = at_end ? 0 : partial_mark(held_, marker);
        give(std::string_view(held_).substr(0, held_.size() - keep));
        held_.erase(0, held_.size() - keep);
      }
    }
    if (in_calls_ && at_end) {
      std::string_view text = held_;
      const size_t start = first_non_space(text);
      if (text.substr(start).rfind(marker, 0) == 0) text.remove_prefix(start + marker.size());
      if (auto calls = parse_calls(text)) add(std::move(*calls));
      else give(held_);  // not calls after all: the text as it is
      held_.clear();
      in_calls_ = false;
    }
  }
  if (at_end) {
    out.content += unsent_;
    if (!blank(after_calls_)) out.content += after_calls_;
    unsent_.clear();
    after_calls_.clear();
  }
}

ToolCallReader::Delta ToolCallReader::push(std::string_view text, bool at_end) {
  Delta out;
  held_ += text;
  read_calls(out, at_end);
  return out;
}

}  // namespace actord
