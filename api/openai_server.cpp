#include "api/openai_server.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <nlohmann/json.hpp>

#include "api/admin_routes.hpp"
#include "api/metrics.hpp"
#include "api/openai_protocol.hpp"
#include "api/openai_reasoning.hpp"
#include "tokenizer/token_texts.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int status_for(const Error& e) {
  return e.code == Errc::invalid_argument || e.code == Errc::resource_exhausted ? 400 : 500;
}

// One API call in flight: its choices (prompt p's sample s is choice p * n + s) and how to answer.
struct Call {
  std::mutex mutex;
  std::shared_ptr<HttpExchange> exchange;
  ApiRequest request;
  std::string id;
  std::string model;
  int64_t created = 0;
  uint32_t n = 1;
  clock_type::time_point start = clock_type::now();
  struct Choice : GenerateOutput {  // what came so far (GenerateOutput::add), and when
    clock_type::time_point first_token, last_token;
    bool announced = false;  // chat stream: the role chunk went out
    std::optional<TokenTexts> texts;  // logprobs' token texts, as far as they were shown
    std::optional<ReasoningReader> reasoning;  // chat, stream: splits the reasoning off the text
    std::optional<ToolCallReader> tools;       // chat with tools, stream: reads calls out of the content
    size_t calls_sent = 0;                     // stream: tool calls given out so far
  };
  std::vector<Choice> choices;
  std::vector<uint64_t> request_ids;  // per prompt, for cancelling
  size_t finished = 0;
  bool streaming = false;             // events started
  std::string chunk_head;             // a stream chunk's fixed fields, up to the choice's index
  bool closed = false;                // the client went away, or the answer is out
};

class Server {
 public:
  Server(Engine& engine, OpenAiOptions options)
      : engine_(engine), options_(std::move(options)), tokenizer_(engine.tokenizer()),
        metrics_(options_.model_name), admin_(engine, options_.api_key) {
    context_.vocab_size = engine.model_config().vocab_size;
    context_.tokenizer = tokenizer_.get();
    auto chat = load_chat_template(engine.model_dir(), &special_tokens_);
    if (chat) chat_template_.emplace(std::move(*chat));
    context_.chat_template = chat_template_ ? &*chat_template_ : nullptr;
    context_.special_tokens = &special_tokens_;
    auto format = tool_call_format(options_.tool_call_parser, context_.chat_template);
    if (format) context_.tool_format = *format;  // (the setting was checked with the topology)
    context_.reasoning = options_.reasoning_parser == "auto" && chat_template_ && reasoning_template(*chat_template_);
  }

  // The engine calls on_event, which uses this server, until each of a call's choices has finished: calls still
  // running are cancelled and their last events awaited (bounded) before the server goes.
  ~Server() {
    std::vector<std::shared_ptr<Call>> running;
    {
      std::lock_guard lock(live_mutex_);
      running.assign(live_.begin(), live_.end());
    }
    for (const auto& call : running) {
      std::vector<uint64_t> ids;
      {
        std::lock_guard lock(call->mutex);
        ids = call->request_ids;
      }
      for (uint64_t id : ids) engine_.cancel(id);
    }
    std::unique_lock lock(live_mutex_);
    live_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return live_.empty(); });
  }

  void handle(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex, bool ready) {
    const std::string path = req.target.substr(0, req.target.find('?'));
    if (path == "/health") return ex->respond(ready ? 200 : 503, "text/plain", ready ? "ok\n" : "starting\n");
    if (path == "/version") return ex->respond(200, "application/json", dump({{"version", kVersion}}));
    if (path == "/metrics") return ex->respond(200, "text/plain; version=0.0.4", metrics_text());
    if (admin_.handle(path, req, ex)) return;
    if (path.rfind("/v1/", 0) != 0) return error(ex, {404, "no route " + path, "", "not_found_error"});
    if (!options_.api_key.empty() && req.authorization != "Bearer " + options_.api_key)
      return error(ex, {401, "a valid API key is required (Authorization: Bearer KEY)", "", "authentication_error"});
    if (path == "/v1/models") {
      if (req.method != "GET") return error(ex, {405, "use GET for " + path, "", "invalid_request_error"});
      // The base model, then its LoRA adapters with the base as their parent (as vLLM lists them).
      json models = json::array({{{"id", options_.model_name},
                                  {"object", "model"},
                                  {"created", 0},
                                  {"owned_by", "actord"},
                                  {"root", options_.model_name},
                                  {"parent", nullptr},
                                  {"max_model_len", engine_.max_model_len()}}});
      for (const LoraModule& adapter : engine_.lora_modules())
        models.push_back({{"id", adapter.name},
                          {"object", "model"},
                          {"created", 0},
                          {"owned_by", "actord"},
                          {"root", adapter.path.string()},
                          {"parent", options_.model_name},
                          {"max_model_len", engine_.max_model_len()}});
      return ex->respond(200, "application/json", dump({{"object", "list"}, {"data", std::move(models)}}));
    }
    const bool chat = path == "/v1/chat/completions";
    if (!chat && path != "/v1/completions") return error(ex, {404, "no route " + path, "", "not_found_error"});
    if (req.method != "POST") return error(ex, {405, "use POST for " + path, "", "invalid_request_error"});
    if (!ready) return error(ex, {503, "the model is still loading", "", "server_error"});
    if (engine_.num_in_flight() >= options_.max_queued_requests)
      return error(ex, {429, "too many requests in flight (" + std::to_string(options_.max_queued_requests) +
                                 ", server.max_queued_requests): retry later", "", "rate_limit_error"});
    auto parsed = parse_request(req.body, chat, context_);
    if (auto* e = std::get_if<ApiError>(&parsed)) return error(ex, *e);
    ApiRequest& request = std::get<ApiRequest>(parsed);
    // The model field names the base model or one of its LoRA adapters.
    if (!request.model.empty() && request.model != options_.model_name) {
      const std::optional<uint32_t> adapter = engine_.lora_adapter(request.model);
      if (!adapter) {
        std::string have = "'" + options_.model_name + "'";
        for (const LoraModule& m : engine_.lora_modules()) have += ", '" + m.name + "'";
        return error(ex, {404, "the model '" + request.model + "' does not exist (this server has " + have + ")",
                          "model", "not_found_error"});
      }
      for (auto& prompt : request.prompts) prompt.lora = *adapter;
      metrics_.count_lora_request(request.model);
    }
    start(std::move(request), ex);
  }

 private:
  static constexpr const char* kVersion = "0.1.0";

  void error(const std::shared_ptr<HttpExchange>& ex, const ApiError& e) {
    metrics_.count_request(e.status >= 500 ? "error" : "refused");
    ex->respond(e.status, "application/json", error_body(e));
  }

  void start(ApiRequest request, const std::shared_ptr<HttpExchange>& ex) {
    auto call = std::make_shared<Call>();
    call->exchange = ex;
    call->model = request.model.empty() ? options_.model_name : request.model;
    call->created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
    call->n = request.prompts[0].sampling.n;
    call->choices.resize(request.prompts.size() * call->n);
    for (auto& c : call->choices) open_readers(request, c.reasoning, c.tools);
    call->id = (request.chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_call_++);
    call->request = std::move(request);
    if (call->request.stream) {
      ex->on_close([this, call] {
        std::lock_guard lock(call->mutex);
        if (call->closed) return;
        call->closed = true;
        for (uint64_t id : call->request_ids) engine_.cancel(id);
      });
    }
    {
      std::lock_guard live(live_mutex_);
      live_.insert(call);
    }
    std::lock_guard lock(call->mutex);  // the callbacks wait until every prompt is submitted
    for (size_t p = 0; p < call->request.prompts.size(); ++p) {
      call->request_ids.push_back(engine_.submit(call->request.prompts[p], [this, call, p](const StreamEvent& e) {
        if (on_event(*call, p * call->n + e.sample_index, e)) {  // its last event: the engine is done with this call
          std::lock_guard live(live_mutex_);
          if (live_.erase(call) > 0) live_cv_.notify_all();
        }
      }));
    }
  }

  // Whether every choice of the call has finished now.
  bool on_event(Call& call, size_t index, const StreamEvent& e) {
    std::lock_guard lock(call.mutex);
    Call::Choice& c = call.choices[index];
    const auto now = clock_type::now();
    if (e.queue_seconds) metrics_.observe_queue_time(*e.queue_seconds);
    if (!e.token_ids.empty()) {
      if (c.generated_ids.empty()) {
        c.first_token = now;
        metrics_.observe_ttft(seconds_between(call.start, now));
      } else {
        metrics_.observe_itl(seconds_between(c.last_token, now));
      }
      c.last_token = now;
    }
    c.add(e);
    if (!e.finish_reason.empty()) {
      ++call.finished;
      if (!c.error) metrics_.count_tokens(index % call.n == 0 ? c.prompt_ids.size() : 0, c.generated_ids.size());
      if (c.generated_ids.size() > 1) metrics_.observe_tpot(seconds_between(c.first_token, c.last_token) / double(c.generated_ids.size() - 1));
    }
    const bool done = call.finished == call.choices.size();
    if (call.closed) return done;
    if (call.request.stream) stream_event(call, index, e);
    if (done) finish(call);
    return done;
  }

  // The text of prompt p as the client sent it (echo).
  std::string prompt_text(const Call& call, size_t index) const {
    const GenerateRequest& r = call.request.prompts[index / call.n];
    return r.prompt ? *r.prompt : tokenizer_->decode(call.choices[index].prompt_ids, false);
  }

  // Choice `index`'s token texts as logprobs show them (tokenizer/token_texts.hpp), brought up to its ids: with echo
  // the prompt's tokens first, else the text after the prompt.
  const TokenTexts& texts_of(Call& call, size_t index) {
    Call::Choice& c = call.choices[index];
    const bool echo = call.request.echo && !call.request.chat;
    if (!c.texts) {
      c.texts.emplace(*tokenizer_, echo ? std::vector<int32_t>{} : c.prompt_ids);
      if (echo) c.texts->extend(c.prompt_ids, false);
    }
    const size_t shown = c.texts->size() - (echo ? c.prompt_ids.size() : 0);
    c.texts->extend(std::span<const int32_t>(c.generated_ids).subspan(std::min(shown, c.generated_ids.size())),
                    !c.finish_reason.empty());
    return *c.texts;
  }

  // What token `id` would add after the first `prompt` prompt ids and `generated` generated ones (an alternative).
  std::string text_after(const Call::Choice& c, size_t prompt, size_t generated, int32_t id) const {
    const size_t total = prompt + generated, keep = std::min(total, IncrementalDetokenizer::kContextReach);
    std::vector<int32_t> before;
    before.reserve(keep);
    for (size_t k = total - keep; k < total; ++k) before.push_back(k < prompt ? c.prompt_ids[k] : c.generated_ids[k - prompt]);
    return TokenTexts::after(*tokenizer_, before, id);
  }

  json completion_logprobs(Call& call, size_t index, size_t from) {
    const TokenTexts& texts = texts_of(call, index);
    const Call::Choice& c = call.choices[index];
    const size_t first = call.request.echo ? c.prompt_ids.size() : 0;  // the texts' index of generated id 0
    json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
    auto add = [&](size_t at, const TokenLogprobs* lp, size_t prompt, size_t generated) {
      tokens.push_back(texts.text(at));
      values.push_back(lp ? json(lp->logprob) : json(nullptr));
      json top = json::object();
      if (lp)
        for (size_t k = 0; k < lp->top_ids.size(); ++k) top[text_after(c, prompt, generated, lp->top_ids[k])] = lp->top_logprobs[k];
      tops.push_back(lp ? top : json(nullptr));
      offsets.push_back(texts.offset(at));
    };
    if (call.request.echo && from == 0) {
      for (size_t t = 0; t < c.prompt_ids.size(); ++t)
        add(t, t > 0 && t - 1 < c.prompt_logprobs.size() ? &c.prompt_logprobs[t - 1] : nullptr, t, 0);
    }
    for (size_t t = from; t < c.generated_ids.size(); ++t)
      add(first + t, t < c.logprobs.size() ? &c.logprobs[t] : nullptr, c.prompt_ids.size(), t);
    return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  json chat_logprobs(Call& call, size_t index, size_t from) {
    const TokenTexts& texts = texts_of(call, index);
    const Call::Choice& c = call.choices[index];
    auto entry = [](const std::string& text, float logprob) {
      return json{{"token", text}, {"logprob", logprob}, {"bytes", std::vector<uint8_t>(text.begin(), text.end())}};
    };
    json content = json::array();
    for (size_t t = from; t < c.generated_ids.size() && t < c.logprobs.size(); ++t) {
      json e = entry(texts.text(t), c.logprobs[t].logprob);
      json top = json::array();
      for (size_t k = 0; k < c.logprobs[t].top_ids.size(); ++k)
        top.push_back(entry(text_after(c, c.prompt_ids.size(), t, c.logprobs[t].top_ids[k]), c.logprobs[t].top_logprobs[k]));
      e["top_logprobs"] = top;
      content.push_back(e);
    }
    return {{"content", content}};
  }

  json usage(const Call& call) const {
    size_t prompt = 0, completion = 0;
    for (size_t i = 0; i < call.choices.size(); ++i) {
      if (i % call.n == 0) prompt += call.choices[i].prompt_ids.size();
      completion += call.choices[i].generated_ids.size();
    }
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }

  json chunk_base(const Call& call) const {
    return {{"id", call.id},
            {"object", call.request.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", call.created},
            {"model", call.model},
            {"system_fingerprint", std::string("actord-") + kVersion}};
  }

  void stream_event(Call& call, size_t index, const StreamEvent& e) {
    Call::Choice& c = call.choices[index];
    if (!call.streaming) {
      if (e.error && !e.finish_reason.empty()) return;  // refused before any token: answered in finish()
      call.streaming = true;
      call.exchange->start_events();
    }
    if (e.error) {
      call.exchange->event(dump({{"error", {{"message", e.error->message}, {"type", "server_error"}}}}));
      return;
    }
    // The chunk is written as text around the call's fixed head (one per token per stream: the hot path); only
    // logprobs, when asked for, go through a json object.
    const size_t from = c.generated_ids.size() - e.token_ids.size();
    if (call.chunk_head.empty()) {
      std::string head = dump(chunk_base(call));
      head.pop_back();  // the closing brace
      call.chunk_head = head + ",\"choices\":[{\"index\":";
    }
    std::string chunk = call.chunk_head;
    chunk += std::to_string(index);
    std::string finish_reason = e.finish_reason;
    if (call.request.chat) {
      // Reasoning and content that are surely so, tool calls once whole (a named choice's as its arguments come).
      MessageDelta d = read_message(c.reasoning, c.tools, e.text, !e.finish_reason.empty());
      chunk += ",\"delta\":{";
      std::string fields;
      auto field = [&](const char* name, const std::string& json_text) {
        fields += (fields.empty() ? "\"" : ",\"") + std::string(name) + "\":" + json_text;
      };
      if (!c.announced) field("role", "\"assistant\"");
      c.announced = true;
      if (!d.reasoning.empty()) field("reasoning_content", dump(d.reasoning));
      if (!d.content.empty()) field("content", dump(d.content));
      json calls = tool_calls_json(d.calls, c.calls_sent);
      c.calls_sent += d.calls.size();
      if (!d.arguments.empty())  // more of the last call's arguments
        calls.push_back({{"index", c.calls_sent - 1}, {"function", {{"arguments", d.arguments}}}});
      if (!calls.empty()) field("tool_calls", dump(calls));
      finish_reason = finish_reason_with_tools(call, finish_reason, c.calls_sent > 0);
      chunk += fields;
      chunk += "},\"logprobs\":";
      chunk += call.request.logprobs >= 0 ? dump(chat_logprobs(call, index, from)) : "null";
    } else {
      const bool echo = call.request.echo && from == 0 && !e.prompt_ids.empty();
      chunk += ",\"text\":" + dump(echo ? prompt_text(call, index) + e.text : e.text);
      chunk += ",\"logprobs\":";
      chunk += call.request.logprobs >= 0 ? dump(completion_logprobs(call, index, from)) : "null";
    }
    chunk += ",\"finish_reason\":";
    chunk += finish_reason.empty() || finish_reason == "cancelled" ? "null" : dump(finish_reason);
    chunk += call.request.include_usage ? "}],\"usage\":null}" : "}]}";
    call.exchange->event(std::move(chunk));
  }

  void finish(Call& call) {
    call.closed = true;
    metrics_.observe_e2e(seconds_between(call.start, clock_type::now()));
    // A request refused before it produced anything answers with its error (a prompt longer than the context).
    for (const auto& c : call.choices) {
      if (c.error && c.generated_ids.empty() && !call.streaming) {
        metrics_.count_request(status_for(*c.error) >= 500 ? "error" : "refused");
        return call.exchange->respond(status_for(*c.error), "application/json",
                                      error_body({status_for(*c.error), c.error->message, "", "invalid_request_error"}));
      }
    }
    metrics_.count_request("success");
    if (call.request.stream) {
      if (!call.streaming) call.exchange->start_events();
      if (call.request.include_usage) {
        json chunk = chunk_base(call);
        chunk["choices"] = json::array();
        chunk["usage"] = usage(call);
        call.exchange->event(dump(chunk));
      }
      call.exchange->event("[DONE]");
      return call.exchange->end_events();
    }
    json choices = json::array();
    for (size_t i = 0; i < call.choices.size(); ++i) {
      const Call::Choice& c = call.choices[i];
      json choice{{"index", i}, {"finish_reason", c.finish_reason}};
      if (call.request.chat) {
        std::optional<ReasoningReader> reasoning;
        std::optional<ToolCallReader> tools;
        open_readers(call.request, reasoning, tools);
        const MessageDelta d = read_message(reasoning, tools, c.text, true);
        choice["message"] = {{"role", "assistant"}, {"content", d.content}};
        if (reasoning) choice["message"]["reasoning_content"] = d.reasoning.empty() ? json(nullptr) : json(d.reasoning);
        if (!d.calls.empty()) {
          if (d.content.empty()) choice["message"]["content"] = nullptr;
          choice["message"]["tool_calls"] = tool_calls_json(d.calls, std::nullopt);
          choice["finish_reason"] = finish_reason_with_tools(call, c.finish_reason, true);
        }
        choice["logprobs"] = call.request.logprobs >= 0 ? chat_logprobs(call, i, 0) : json(nullptr);
      } else {
        choice["text"] = call.request.echo ? prompt_text(call, i) + c.text : c.text;
        choice["logprobs"] = call.request.logprobs >= 0 ? completion_logprobs(call, i, 0) : json(nullptr);
      }
      choices.push_back(choice);
    }
    json body = chunk_base(call);
    body["object"] = call.request.chat ? "chat.completion" : "text_completion";
    body["choices"] = choices;
    body["usage"] = usage(call);
    call.exchange->respond(200, "application/json", dump(body));
  }

  // The readers a chat choice's text goes through: reasoning off first, then tool calls out of the content.
  static void open_readers(const ApiRequest& request, std::optional<ReasoningReader>& reasoning,
                           std::optional<ToolCallReader>& tools) {
    if (request.reasoning) reasoning.emplace(request.reasoning_open);
    if (request.tools.choice != ToolUse::Choice::none) tools.emplace(request.tools);
  }

  struct MessageDelta {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    std::string arguments;  // more of the last call's arguments (a named choice's)
  };
  // What a chat choice's next text (its last with at_end) adds to its message.
  static MessageDelta read_message(std::optional<ReasoningReader>& reasoning, std::optional<ToolCallReader>& tools,
                                   std::string_view text, bool at_end) {
    MessageDelta d;
    d.content = text;
    if (reasoning) {
      ReasoningReader::Delta r = reasoning->push(text, at_end);
      d.reasoning = std::move(r.reasoning);
      d.content = std::move(r.content);
    }
    if (tools) {
      ToolCallReader::Delta t = tools->push(d.content, at_end);
      d.content = std::move(t.content);
      d.calls = std::move(t.calls);
      d.arguments = std::move(t.arguments);
    }
    return d;
  }

  // Tool calls as a message gives them, or as a stream's delta does (each with its index among the choice's calls,
  // from `first`).
  static json tool_calls_json(const std::vector<ToolCall>& calls, std::optional<size_t> first) {
    json list = json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
      json j;
      if (first) j["index"] = *first + k;
      j["id"] = calls[k].id;
      j["type"] = "function";
      j["function"] = {{"name", calls[k].name}, {"arguments", calls[k].arguments}};
      list.push_back(std::move(j));
    }
    return list;
  }

  // A choice that ended by itself after the model chose to call tools (tool_choice auto) finishes with tool_calls,
  // as OpenAI's and vLLM's; a call the request forced (required, named) with stop.
  static std::string finish_reason_with_tools(const Call& call, const std::string& reason, bool called) {
    return reason == "stop" && called && call.request.tools.choice == ToolUse::Choice::automatic ? "tool_calls"
                                                                                                   : reason;
  }

  std::string metrics_text() {
    auto stats = engine_.stats();
    return metrics_.text(stats ? &*stats : nullptr, engine_.num_in_flight());
  }

  Engine& engine_;
  OpenAiOptions options_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  nlohmann::json special_tokens_;
  ParseContext context_;
  ApiMetrics metrics_;
  std::mutex live_mutex_;  // guards live_
  std::condition_variable live_cv_;
  std::set<std::shared_ptr<Call>> live_;  // calls with a choice the engine has not finished
  AdminRoutes admin_;  // its thread calls engine_: declared last, stopped first
  std::atomic<uint64_t> next_call_{1};
};

}  // namespace

struct OpenAiServer::Impl {
  Impl(Engine& engine, OpenAiOptions options) : server(engine, std::move(options)) {}
  Server server;
};

OpenAiServer::OpenAiServer(Engine& engine, OpenAiOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

OpenAiServer::~OpenAiServer() = default;

void OpenAiServer::handle(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange) {
  impl_->server.handle(request, exchange, ready_);
}

}  // namespace actord
