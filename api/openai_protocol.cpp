#include "api/openai_protocol.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "api/openai_reasoning.hpp"
#include "structured/compile_check.hpp"
#include "structured/regex.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord {
namespace {

using json = nlohmann::ordered_json;  // keeps a schema's properties in their order

struct Refusal {
  ApiError error;
};

[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw Refusal{ApiError{400, param + ": " + message, param}};
}

// A value as an error message quotes it: numbers, booleans and short strings as written, anything else by its type
// (a deeply nested value would make dump() recurse as deep as the body nests). Non-finite numbers (1e999 parses as
// inf) read as inf / -inf.
std::string describe(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) return v.get<double>() > 0 ? "inf" : "-inf";
  if (v.is_number() || v.is_boolean() || v.is_null() || (v.is_string() && v.get_ref<const std::string&>().size() <= 40))
    return v.dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string type = v.type_name();
  return (type == "array" || type == "object" ? "an " : "a ") + type;
}

// An integer field in [min, max]: floats (1.5, 1e300), out-of-range values and values beyond 64 bits are refused.
int64_t integer(const json& body, const char* field, int64_t min, int64_t max) {
  const json& v = body.at(field);
  if (!v.is_number_integer()) refuse(field, "must be an integer, got " + describe(v));
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= static_cast<uint64_t>(max) && (min <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(min))
                            : v.get<int64_t>() >= min && v.get<int64_t>() <= max;
  if (!in_range) refuse(field, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + describe(v));
  return v.get<int64_t>();
}

// A finite number that fits in a float; NaN cannot be written in JSON, inf (1e999) and 1e300 are refused here.
float number(const json& body, const char* field) {
  const json& v = body.at(field);
  if (!v.is_number()) refuse(field, "must be a number, got " + describe(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::abs(d) > std::numeric_limits<float>::max())
    refuse(field, "must be finite, got " + describe(v));
  return static_cast<float>(d);
}

bool boolean(const json& body, const char* field) {
  const json& v = body.at(field);
  if (!v.is_boolean()) refuse(field, "must be true or false, got " + describe(v));
  return v.get<bool>();
}

// The OpenAI API's logit_bias: an object from token ids (decimal strings) to biases in [-100, 100], ids in the
// vocabulary; in increasing id order for SamplingOptions.
std::vector<LogitBias> logit_biases(const json& body, int vocab_size) {
  const json& v = body.at("logit_bias");
  if (!v.is_object()) refuse("logit_bias", "must be an object from token ids to biases, got " + describe(v));
  std::vector<LogitBias> biases;
  for (const auto& [key, value] : v.items()) {
    int64_t id = -1;
    const char* end = key.data() + key.size();
    const auto [at, error] = std::from_chars(key.data(), end, id);
    if (key.empty() || error != std::errc{} || at != end || id < 0)
      refuse("logit_bias", "keys must be token ids, got " + describe(json(key)));
    if (vocab_size > 0 && id >= vocab_size)
      refuse("logit_bias", "token id " + key + " is outside the vocabulary (size " + std::to_string(vocab_size) + ")");
    if (id > INT32_MAX) refuse("logit_bias", "token id " + key + " is outside the vocabulary");
    if (!value.is_number()) refuse("logit_bias", "the bias of token " + key + " must be a number, got " + describe(value));
    const double bias = value.get<double>();
    if (!(bias >= -SamplingOptions::kMaxLogitBias && bias <= SamplingOptions::kMaxLogitBias))
      refuse("logit_bias", "the bias of token " + key + " must be in [-100, 100], got " + describe(value));
    biases.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
  }
  std::sort(biases.begin(), biases.end(), [](const LogitBias& a, const LogitBias& b) { return a.id < b.id; });
  for (size_t i = 1; i < biases.size(); ++i) {
    if (biases[i].id == biases[i - 1].id)
      refuse("logit_bias", "token id " + std::to_string(biases[i].id) + " is given twice");
  }
  return biases;
}

// response_format: text, json_object (one JSON object) or json_schema (one JSON object or array its schema admits,
// structured/json_schema.hpp, compiled here so that a schema it does not support is refused naming the keyword);
// the JSON formats need the model to have an end-of-sequence token to end the value.
void response_format(const json& body, const ParseContext& context, SamplingOptions& o) {
  const json& v = body.at("response_format");
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    refuse("response_format", "must be an object with a string type, got " + describe(v));
  const std::string& type = v["type"].get_ref<const std::string&>();
  if (type == "text") {
    o.response_format = ResponseFormat::text;
    return;
  }
  if (type != "json_object" && type != "json_schema")
    refuse("response_format", "type must be text, json_object or json_schema, got " + describe(v["type"]));
  if (context.tokenizer && context.tokenizer->stop_ids().empty())
    refuse("response_format", type + " needs the model to have an end-of-sequence token, and it has none");
  if (type == "json_object") {
    o.response_format = ResponseFormat::json_object;
    return;
  }
  if (!v.contains("json_schema") || !v["json_schema"].is_object())
    refuse("response_format", "json_schema must be an object with the schema in json_schema.schema");
  const json& js = v["json_schema"];
  for (const auto& [key, value] : js.items()) {
    if (key != "name" && key != "schema" && key != "strict" && key != "description")
      refuse("response_format", "json_schema." + key + ": unknown field");
  }
  if (js.contains("name") && !js["name"].is_string()) refuse("response_format", "json_schema.name must be a string");
  if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
    refuse("response_format", "json_schema.strict must be a boolean");
  if (!js.contains("schema") || !(js["schema"].is_object() || js["schema"].is_boolean()))
    refuse("response_format", "json_schema.schema must be a JSON schema (an object)");
  std::string text = js["schema"].dump();
  if (Status compiled = structured::compiles(ResponseFormat::json_schema, text); !compiled)
    refuse("response_format", "json_schema.schema: " + compiled.error().message);
  o.response_format = ResponseFormat::json_schema;
  o.json_schema = std::move(text);
}

// vLLM's constraints on the generated text: guided_json (a JSON schema, as an object or its text) as a
// response_format json_schema, guided_regex (a pattern the whole text matches) and guided_choice (one of the
// strings, each taken literally) as response_format regex (structured/regex.hpp), guided_grammar (a GBNF grammar,
// llama.cpp's format) as response_format grammar (structured/grammar.hpp); the same as structured_outputs {json |
// json_object | regex | choice | grammar} (vLLM's newer spelling); llama-server's json_schema and grammar fields.
// Each is compiled here, so that one it does not take is refused naming what and where. At most one of them, and
// not with a response_format other than text. guided_decoding_backend (vLLM's choice of engine for them) is read and
// has no effect: actord has one.
void guided(const json& body, const ParseContext& context, SamplingOptions& o) {
  std::string field, text;
  ResponseFormat format = ResponseFormat::regex;
  auto choices_of = [&](const std::string& name, const json& v) {
    if (!v.is_array() || v.empty()) refuse(name, "must be a non-empty list of strings, got " + describe(v));
    std::vector<std::string> choices;
    for (const json& c : v) {
      if (!c.is_string()) refuse(name, "must be a non-empty list of strings, got " + describe(c) + " in it");
      choices.push_back(c.get<std::string>());
    }
    return structured::regex_of_choices(choices);
  };
  auto take = [&](const std::string& name, std::string t, ResponseFormat f) {
    if (!field.empty()) refuse(name, "cannot be combined with " + field + ": one constraint on the text at a time");
    field = name;
    text = std::move(t);
    format = f;
  };
  auto string_of = [&](const std::string& name, const json& v) {
    if (!v.is_string()) refuse(name, "must be a string, got " + describe(v));
    return v.get<std::string>();
  };
  auto schema_of = [&](const std::string& name, const json& v) {  // a schema object, or its JSON text
    if (!v.is_object() && !v.is_string()) refuse(name, "must be a JSON schema (an object or its text), got " + describe(v));
    return v.is_object() ? v.dump() : v.get<std::string>();
  };
  auto given = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  if (given("guided_decoding_backend")) (void)string_of("guided_decoding_backend", body["guided_decoding_backend"]);
  if (given("guided_json")) take("guided_json", schema_of("guided_json", body["guided_json"]), ResponseFormat::json_schema);
  if (given("guided_regex")) take("guided_regex", string_of("guided_regex", body["guided_regex"]), ResponseFormat::regex);
  if (given("guided_choice")) take("guided_choice", choices_of("guided_choice", body["guided_choice"]), ResponseFormat::regex);
  if (given("guided_grammar")) take("guided_grammar", string_of("guided_grammar", body["guided_grammar"]), ResponseFormat::grammar);
  if (given("json_schema")) take("json_schema", schema_of("json_schema", body["json_schema"]), ResponseFormat::json_schema);
  if (given("grammar")) take("grammar", string_of("grammar", body["grammar"]), ResponseFormat::grammar);
  if (given("structured_outputs")) {
    const json& so = body["structured_outputs"];
    if (!so.is_object()) refuse("structured_outputs", "must be an object, got " + describe(so));
    for (const auto& [key, value] : so.items()) {
      if (value.is_null()) continue;
      const std::string name = "structured_outputs." + key;
      if (key == "regex") {
        take(name, string_of(name, value), ResponseFormat::regex);
      } else if (key == "choice") {
        take(name, choices_of(name, value), ResponseFormat::regex);
      } else if (key == "grammar") {
        take(name, string_of(name, value), ResponseFormat::grammar);
      } else if (key == "json") {
        take(name, schema_of(name, value), ResponseFormat::json_schema);
      } else if (key == "json_object") {
        if (!value.is_boolean()) refuse(name, "must be a boolean, got " + describe(value));
        if (value.get<bool>()) take(name, "", ResponseFormat::json_object);
      } else {
        refuse("structured_outputs", key + " is not supported; supported: json, json_object, regex, choice, grammar");
      }
    }
  }
  if (field.empty()) return;
  if (o.structured())
    refuse(field, std::string("cannot be combined with a response_format of ") + o.response_format_name());
  if (context.tokenizer && context.tokenizer->stop_ids().empty())
    refuse(field, "needs the model to have an end-of-sequence token to end the text, and it has none");
  o.response_format = format;
  if (std::string* format_text = o.format_text()) {  // json_object has none
    if (Status compiled = structured::compiles(format, text); !compiled) refuse(field, compiled.error().message);
    *format_text = std::move(text);
  }
}

std::vector<int32_t> token_ids(const json& list, const char* field, int vocab_size) {
  std::vector<int32_t> ids;
  const int64_t end = vocab_size > 0 ? vocab_size : int64_t{INT32_MAX} + 1;
  for (const json& t : list) {
    const bool ok = t.is_number_unsigned() ? t.get<uint64_t>() < static_cast<uint64_t>(end)
                                           : t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < end;
    if (!ok)
      refuse(field, "token id " + describe(t) + " is outside the vocabulary (size " + std::to_string(vocab_size) + ")");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

// The prompts of a completions request: a string, a list of strings, a list of token ids, or a list of those.
std::vector<GenerateRequest> prompts_of(const json& prompt, int vocab_size) {
  std::vector<GenerateRequest> out;
  auto add_text = [&](const json& s) {
    GenerateRequest r;
    r.prompt = s.get<std::string>();
    out.push_back(std::move(r));
  };
  auto add_ids = [&](const json& list) {
    GenerateRequest r;
    r.prompt_ids = token_ids(list, "prompt", vocab_size);
    if (r.prompt_ids.empty()) refuse("prompt", "a list of token ids must not be empty");
    out.push_back(std::move(r));
  };
  if (prompt.is_string()) {
    add_text(prompt);
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    add_ids(prompt);
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const json& p : prompt) {
      if (p.is_string()) add_text(p);
      else if (p.is_array()) add_ids(p);
      else refuse("prompt", "must be a string, a list of strings, a list of token ids or a list of such lists");
    }
  } else {
    refuse("prompt", "must be a string, a list of strings, a list of token ids or a list of such lists");
  }
  return out;
}

struct ChatPrompt {
  std::vector<int32_t> ids;
  bool opens_reasoning = false;  // the prompt leaves a <think> block open (openai_reasoning.hpp)
};

// The conversation rendered with the chat template (with the request's tools and chat_template_kwargs), as token ids.
ChatPrompt chat_prompt(const json& body, const json& tools, const ParseContext& context) {
  const json& messages = body.at("messages");
  if (!messages.is_array() || messages.empty()) refuse("messages", "must be a non-empty list of messages");
  for (const json& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      refuse("messages", "each message must be an object with a string role");
    if (m.contains("content") && !m["content"].is_string() && !m["content"].is_array() && !m["content"].is_null())
      refuse("messages", "a message's content must be a string or a list of parts");
  }
  if (!context.chat_template) {
    throw Refusal{ApiError{400, "the model has no chat template: use /v1/completions", "messages"}};
  }
  nlohmann::ordered_json render;
  render["messages"] = messages_for_template(messages);
  render["add_generation_prompt"] = true;
  render["tools"] = tools;  // null without tools, as HF's apply_chat_template gives it
  if (context.special_tokens) {
    for (const auto& [key, value] : context.special_tokens->items()) render[key] = value;
  }
  // vLLM's chat_template_kwargs: more variables for the template (Qwen3's enable_thinking: false).
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const json& kwargs = body["chat_template_kwargs"];
    if (!kwargs.is_object()) refuse("chat_template_kwargs", "must be an object of template variables");
    for (const auto& [key, value] : kwargs.items()) {
      if (key == "messages" || key == "tools" || key == "add_generation_prompt")
        refuse("chat_template_kwargs", key + " is set by the request itself, not here");
      render[key] = value;
    }
  }
  auto text = context.chat_template->render(render);
  if (!text) refuse("messages", text.error().message);
  return ChatPrompt{context.tokenizer->encode(*text, false), prompt_opens_reasoning(*text)};
}

const std::set<std::string>& known_fields(bool chat) {
  static const std::set<std::string> completions{
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
      "presence_penalty", "repetition_penalty", "seed", "n", "stop", "logprobs", "echo", "user", "priority",
      "ignore_eos", "min_tokens", "stream", "stream_options", "prompt_logprobs", "suffix", "best_of", "logit_bias",
      "response_format", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs", "guided_json",
      "guided_decoding_backend", "json_schema", "grammar"};
  static const std::set<std::string> chat_fields{
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
      "frequency_penalty", "presence_penalty", "repetition_penalty", "seed", "n", "stop", "logprobs",
      "top_logprobs", "user", "priority", "ignore_eos", "min_tokens", "stream", "stream_options", "logit_bias",
      "response_format", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "guided_regex",
      "guided_choice", "guided_grammar", "structured_outputs", "guided_json", "guided_decoding_backend",
      "json_schema", "grammar"};
  return chat ? chat_fields : completions;
}

ApiRequest parse(const json& body, bool chat, const ParseContext& context) {
  if (!body.is_object()) throw Refusal{ApiError{400, "the body must be a JSON object", ""}};
  for (const auto& [key, value] : body.items()) {
    if (!known_fields(chat).count(key)) refuse(key, "unknown field");
  }
  ApiRequest request;
  request.chat = chat;
  if (body.contains("model")) {
    if (!body["model"].is_string()) refuse("model", "must be a string");
    request.model = body["model"].get<std::string>();
  }
  GenerateRequest proto;  // what every prompt shares
  proto.max_tokens = 16;
  auto has = [&](const char* field) { return body.contains(field) && !body[field].is_null(); };
  if (has("max_tokens")) proto.max_tokens = static_cast<uint32_t>(integer(body, "max_tokens", 1, 1 << 24));
  if (chat && has("max_completion_tokens"))
    proto.max_tokens = static_cast<uint32_t>(integer(body, "max_completion_tokens", 1, 1 << 24));
  SamplingOptions& o = proto.sampling;
  if (has("temperature")) o.temperature = number(body, "temperature");
  if (has("top_p")) o.top_p = number(body, "top_p");
  if (has("top_k")) o.top_k = static_cast<int32_t>(integer(body, "top_k", -1, INT32_MAX));
  if (has("min_p")) o.min_p = number(body, "min_p");
  if (has("frequency_penalty")) o.frequency_penalty = number(body, "frequency_penalty");
  if (has("presence_penalty")) o.presence_penalty = number(body, "presence_penalty");
  if (has("repetition_penalty")) o.repetition_penalty = number(body, "repetition_penalty");
  if (has("seed")) o.seed = static_cast<uint64_t>(integer(body, "seed", INT64_MIN, INT64_MAX));
  if (has("n")) o.n = static_cast<uint32_t>(integer(body, "n", 0, 1 << 20));
  if (has("min_tokens")) o.min_tokens = static_cast<uint32_t>(integer(body, "min_tokens", 0, proto.max_tokens));
  if (has("priority")) proto.priority = static_cast<int32_t>(integer(body, "priority", INT32_MIN, INT32_MAX));
  if (has("ignore_eos")) proto.ignore_eos = boolean(body, "ignore_eos");
  if (has("logit_bias")) o.logit_bias = logit_biases(body, context.vocab_size);
  if (has("response_format")) response_format(body, context, o);
  guided(body, context, o);
  json tools;  // for the chat template
  if (chat) {
    auto read = read_tools(body, context.tool_format,
                           context.chat_template && renders_tools(*context.chat_template));
    if (auto* e = std::get_if<ToolsError>(&read))
      throw Refusal{ApiError{400, e->message.rfind(e->param, 0) == 0 ? e->message : e->param + ": " + e->message,
                             e->param}};
    ToolsRequest& t = std::get<ToolsRequest>(read);
    request.tools = t.use;
    tools = std::move(t.tools);
    if (t.use.constrained()) {  // the text is the call(s): constrained as a json_schema
      const bool named = t.use.choice == ToolUse::Choice::named;
      if (o.structured())
        refuse("tool_choice", std::string(named ? "a named function" : "required") +
                                  " cannot be combined with a response_format of " + o.response_format_name());
      if (context.tokenizer && context.tokenizer->stop_ids().empty())
        refuse("tool_choice", "needs the model to have an end-of-sequence token to end the call, and it has none");
      o.response_format = ResponseFormat::json_schema;
      o.json_schema = std::move(t.schema);
    }
  }
  if (o.structured() && proto.ignore_eos)
    refuse("ignore_eos", request.tools.constrained()
                             ? std::string("cannot be true with tool_choice required or a named function: the call "
                                           "ends at its end of sequence")
                             : std::string("cannot be true with a response_format of ") + o.response_format_name() +
                                   ": the text ends at its end of sequence");
  if (has("stream")) request.stream = boolean(body, "stream");
  if (has("stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) refuse("stream_options", "must be an object");
    if (so.contains("include_usage")) request.include_usage = boolean(so, "include_usage");
  }
  if (has("stop")) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      proto.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& s : stop) {
        if (!s.is_string()) refuse("stop", "must be a string or a list of strings");
        proto.stop.push_back(s.get<std::string>());
      }
    } else {
      refuse("stop", "must be a string or a list of strings");
    }
    for (const auto& s : proto.stop)
      if (s.empty()) refuse("stop", "a stop string must not be empty");
  }
  if (chat) {
    if (has("logprobs") && boolean(body, "logprobs")) request.logprobs = 0;
    if (has("top_logprobs")) {
      const int top = static_cast<int>(integer(body, "top_logprobs", 0, SamplingOptions::kMaxLogprobs));
      if (request.logprobs < 0) refuse("top_logprobs", "needs logprobs: true");
      request.logprobs = top;
    }
  } else {
    if (has("logprobs")) request.logprobs = static_cast<int>(integer(body, "logprobs", 0, SamplingOptions::kMaxLogprobs));
    if (has("echo")) request.echo = boolean(body, "echo");
    if (has("prompt_logprobs"))
      o.prompt_logprobs = static_cast<int32_t>(integer(body, "prompt_logprobs", 0, SamplingOptions::kMaxLogprobs));
    if (has("suffix")) refuse("suffix", "is not supported");
    if (has("best_of") && integer(body, "best_of", 1, 1) != 1) refuse("best_of", "is not supported");
  }
  o.logprobs = request.logprobs;
  if (request.echo && request.logprobs >= 0 && o.prompt_logprobs < 0) o.prompt_logprobs = request.logprobs;
  if (auto valid = o.validate(context.vocab_size); !valid) {
    const std::string& message = valid.error().message;
    throw Refusal{ApiError{400, message, message.substr(0, message.find(':'))}};
  }
  if (chat) {
    if (!has("messages")) refuse("messages", "is required");
    GenerateRequest r = proto;
    ChatPrompt prompt = chat_prompt(body, tools, context);
    r.prompt_ids = std::move(prompt.ids);
    request.prompts.push_back(std::move(r));
    // A reply that is not constrained to JSON is split into reasoning and content (openai_reasoning.hpp).
    request.reasoning = context.reasoning && !o.structured();
    request.reasoning_open = request.reasoning && prompt.opens_reasoning;
  } else {
    if (!has("prompt")) refuse("prompt", "is required");
    for (GenerateRequest& p : prompts_of(body["prompt"], context.vocab_size)) {
      GenerateRequest r = proto;
      r.prompt = std::move(p.prompt);
      r.prompt_ids = std::move(p.prompt_ids);
      request.prompts.push_back(std::move(r));
    }
  }
  return request;
}

}  // namespace

std::string error_body(const ApiError& error) {
  json e{{"message", error.message}, {"type", error.type}, {"code", nullptr}};
  e["param"] = error.param.empty() ? json(nullptr) : json(error.param);
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::variant<ApiRequest, ApiError> parse_request(const std::string& body, bool chat, const ParseContext& context) {
  // Nesting is bounded while parsing: copying, comparing or printing a JSON value recurses once per level, and a
  // body of a megabyte can nest half a million levels. The top-level field being read is remembered, so that a
  // number beyond a double (1e999, valid JSON that nlohmann refuses) or a bad literal (NaN) is refused naming it.
  struct TooDeep {};
  std::string field;
  json parsed;
  try {
    parsed = json::parse(body, [&](int depth, json::parse_event_t event, json& value) {
      if (depth > kMaxBodyDepth) throw TooDeep{};
      if (event == json::parse_event_t::key && depth == 1) field = value.get<std::string>();
      return true;
    });
  } catch (const TooDeep&) {
    return ApiError{400, "the body nests deeper than " + std::to_string(kMaxBodyDepth) + " levels", ""};
  } catch (const json::out_of_range& e) {  // "number overflow parsing '1e999'"
    const std::string what = e.what();
    const size_t quote = what.find('\'');
    const std::string number = quote == std::string::npos ? "a number beyond a double" : what.substr(quote);
    if (field.empty()) return ApiError{400, "the body is not valid JSON: " + number + " is not finite", ""};
    return ApiError{400, field + ": must be finite, got " + number, field};
  } catch (const json::exception& e) {
    const std::string what = e.what();
    const size_t detail = what.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] "
    return ApiError{400,
                    "the body is not valid JSON" + std::string(field.empty() ? "" : " (in " + field + ")") + ": " +
                        (detail == std::string::npos ? what : what.substr(detail + 2)),
                    field};
  }
  try {
    return parse(parsed, chat, context);
  } catch (const Refusal& r) {
    return r.error;
  } catch (const json::exception& e) {
    return ApiError{400, std::string("malformed request: ") + e.what(), ""};
  }
}

}  // namespace actord
