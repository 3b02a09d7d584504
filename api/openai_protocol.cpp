#include "api/openai_protocol.hpp"

#include <cmath>
#include <limits>
#include <set>

#include "tokenizer/tokenizer.hpp"

namespace actord {
namespace {

using json = nlohmann::json;

struct Refusal {
  ApiError error;
};

[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw Refusal{ApiError{400, param + ": " + message, param}};
}

int64_t integer(const json& body, const char* field, int64_t min, int64_t max) {
  const json& v = body.at(field);
  if (!v.is_number_integer()) refuse(field, "must be an integer, got " + v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(max) : v.get<int64_t>() > max ||
                                                                                     v.get<int64_t>() < min)
    refuse(field, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + v.dump());
  return v.get<int64_t>();
}

float number(const json& body, const char* field) {
  const json& v = body.at(field);
  if (!v.is_number()) refuse(field, "must be a number, got " + v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::abs(d) > std::numeric_limits<float>::max()) refuse(field, "must be finite, got " + v.dump());
  return static_cast<float>(d);
}

bool boolean(const json& body, const char* field) {
  const json& v = body.at(field);
  if (!v.is_boolean()) refuse(field, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

std::vector<int32_t> token_ids(const json& list, const char* field, int vocab_size) {
  std::vector<int32_t> ids;
  for (const json& t : list) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || (vocab_size > 0 && t.get<int64_t>() >= vocab_size))
      refuse(field, "token id " + t.dump() + " is outside the vocabulary (size " + std::to_string(vocab_size) + ")");
    ids.push_back(t.get<int32_t>());
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

// The conversation rendered with the chat template, as token ids.
std::vector<int32_t> chat_prompt(const json& body, const ParseContext& context) {
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
  render["messages"] = messages;
  render["add_generation_prompt"] = true;
  if (context.special_tokens) {
    for (const auto& [key, value] : context.special_tokens->items()) render[key] = value;
  }
  auto text = context.chat_template->render(render);
  if (!text) refuse("messages", text.error().message);
  return context.tokenizer->encode(*text, false);
}

const std::set<std::string>& known_fields(bool chat) {
  static const std::set<std::string> completions{
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
      "presence_penalty", "repetition_penalty", "seed", "n", "stop", "logprobs", "echo", "user", "priority",
      "ignore_eos", "min_tokens", "stream", "stream_options", "prompt_logprobs", "suffix", "best_of"};
  static const std::set<std::string> chat_fields{
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
      "frequency_penalty", "presence_penalty", "repetition_penalty", "seed", "n", "stop", "logprobs",
      "top_logprobs", "user", "priority", "ignore_eos", "min_tokens", "stream", "stream_options"};
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
  if (has("min_tokens")) o.min_tokens = static_cast<uint32_t>(integer(body, "min_tokens", 0, 1 << 24));
  if (has("priority")) proto.priority = static_cast<int32_t>(integer(body, "priority", INT32_MIN, INT32_MAX));
  if (has("ignore_eos")) proto.ignore_eos = boolean(body, "ignore_eos");
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
    r.prompt_ids = chat_prompt(body, context);
    request.prompts.push_back(std::move(r));
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
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return ApiError{400, "the body is not valid JSON", ""};
  try {
    return parse(parsed, chat, context);
  } catch (const Refusal& r) {
    return r.error;
  } catch (const json::exception& e) {
    return ApiError{400, std::string("malformed request: ") + e.what(), ""};
  }
}

}  // namespace actord
