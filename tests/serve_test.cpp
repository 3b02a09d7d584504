// The OpenAI-compatible HTTP API over loopback, as a client sees it: answers equal the engine's own, SSE framing,
// n samples, errors with the right status and OpenAI's error shape for bad input (the server keeps serving), the
// API key, body limits, a client that disconnects mid-stream, and `actord serve` stopping on SIGTERM.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <utility>  // before Boost 1.74 asio, whose awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "api/http_server.hpp"
#include "api/openai_server.hpp"
#include "engine_test_util.hpp"
#include "http_client_util.hpp"
#include "cli_util.hpp"
#include "process_util.hpp"
#include "serve_test_util.hpp"
#include "structured/json_matcher.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
using json = nlohmann::json;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using test::call;
using test::Reply;
using test::events_of;
using test::Served;

TEST_CASE("serve - completions equal the engine's generate - streamed and not - n samples", "[serve]") {
  Served s;
  CHECK(call(s.port, "GET", "/health").status == 200);
  auto models = json::parse(call(s.port, "GET", "/v1/models").body);
  CHECK(models["data"][0]["id"] == "stories260K");

  GenerateRequest g;
  g.prompt = "Once upon a time";
  g.max_tokens = 30;
  g.sampling.temperature = 0.8f;
  g.sampling.seed = 11;
  g.sampling.n = 2;
  auto expected = s.engine->generate({g});
  REQUIRE(expected.ok());

  const std::string body = R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":30,"temperature":0.8,"seed":11,"n":2})";
  auto plain = call(s.port, "POST", "/v1/completions", body);
  REQUIRE(plain.status == 200);
  auto j = json::parse(plain.body);
  REQUIRE(j["choices"].size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(j["choices"][i]["index"] == i);
    CHECK(j["choices"][i]["text"] == (*expected)[i].text);
    CHECK(j["choices"][i]["finish_reason"] == (*expected)[i].finish_reason);
  }
  CHECK(j["usage"]["prompt_tokens"] == (*expected)[0].prompt_ids.size());
  CHECK(j["usage"]["completion_tokens"] ==
        (*expected)[0].generated_ids.size() + (*expected)[1].generated_ids.size());

  auto streamed = call(s.port, "POST", "/v1/completions",
                       body.substr(0, body.size() - 1) + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  REQUIRE(streamed.status == 200);
  auto events = events_of(streamed.body);
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  std::string text[2];
  std::string finish[2];
  for (size_t e = 0; e + 2 < events.size(); ++e) {
    auto chunk = json::parse(events[e]);
    CHECK(chunk["object"] == "text_completion");
    const int index = chunk["choices"][0]["index"];
    text[index] += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish[index] = chunk["choices"][0]["finish_reason"];
  }
  for (int i = 0; i < 2; ++i) {
    CHECK(text[i] == (*expected)[i].text);
    CHECK(finish[i] == (*expected)[i].finish_reason);
  }
  auto usage = json::parse(events[events.size() - 2]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"] == j["usage"]);
  CHECK(s.engine->num_in_flight() == 0);
}

TEST_CASE("serve - bad requests get OpenAI errors with the right status - the server keeps serving", "[serve]") {
  Served s("sekrit", 4096);
  auto status_of = [&](const std::string& target, const std::string& body, const std::string& key = "sekrit") {
    return call(s.port, "POST", target, body, key);
  };
  auto error_of = [&](const Reply& r) { return json::parse(r.body)["error"]; };
  CHECK(status_of("/v1/completions", R"({"prompt":"x"})", "").status == 401);
  CHECK(status_of("/v1/completions", R"({"prompt":"x"})", "wrong").status == 401);
  CHECK(call(s.port, "GET", "/health").status == 200);  // no key needed
  auto bad = status_of("/v1/completions", R"({"prompt":"x","temperature":-1})");
  CHECK(bad.status == 400);
  CHECK(error_of(bad)["param"] == "temperature");
  CHECK(error_of(bad)["message"] == "temperature: must be finite and >= 0, got -1");
  CHECK(status_of("/v1/completions", "{not json").status == 400);
  CHECK(status_of("/v1/completions", "[1,2]").status == 400);
  CHECK(error_of(status_of("/v1/completions", R"({"prompt":"x","max_tokens":"lots"})"))["param"] == "max_tokens");
  CHECK(error_of(status_of("/v1/completions", R"({"prompt":"x","max_tokens":1e300})"))["param"] == "max_tokens");
  CHECK(error_of(status_of("/v1/completions", R"({"prompt":"x","n":0})"))["param"] == "n");
  CHECK(error_of(status_of("/v1/completions", R"({"prompt":"x","top_p":0})"))["param"] == "top_p");
  CHECK(error_of(status_of("/v1/completions", R"({"prompt":"x","logprobs":21})"))["param"] == "logprobs");
  CHECK(error_of(status_of("/v1/completions", R"({"prompt":"x","frobnicate":1})"))["param"] == "frobnicate");
  CHECK(error_of(status_of("/v1/completions", R"({"prompt":[1,99999]})"))["param"] == "prompt");
  CHECK(error_of(status_of("/v1/completions", R"({"max_tokens":3})"))["param"] == "prompt");
  CHECK(status_of("/v1/completions", "{\"prompt\":\"\xff\xfe\"}").status == 400);  // invalid UTF-8
  CHECK(status_of("/v1/completions", std::string(2000, '[') + std::string(2000, ']')).status == 400);
  CHECK(status_of("/v1/completions", R"({"prompt":")" + std::string(5000, 'a') + "\"}").status == 413);
  auto missing = status_of("/v1/completions", R"({"prompt":"x","model":"gpt-4"})");
  CHECK(missing.status == 404);
  CHECK(error_of(missing)["param"] == "model");
  CHECK(status_of("/v1/nothing", "{}").status == 404);
  CHECK(call(s.port, "GET", "/v1/completions", "", "sekrit").status == 405);
  CHECK(status_of("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})").status == 400);
  std::string ids = "[1";
  for (int i = 0; i < 600; ++i) ids += ",5";
  auto long_prompt = status_of("/v1/completions", R"({"prompt":)" + ids + "]}");
  CHECK(long_prompt.status == 400);
  CHECK_THAT(error_of(long_prompt)["message"].get<std::string>(), Catch::Contains("more than the context length"));
  // Still serving.
  auto ok = status_of("/v1/completions", R"({"prompt":"Once","max_tokens":3,"temperature":0})");
  CHECK(ok.status == 200);
  CHECK(json::parse(ok.body)["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("serve - logit_bias steers the tokens, completions and chat - JSON mode - bad biases and schemas are refused",
          "[serve]") {
  test::TempDir tmp;  // stories260K with a chat template of our own
  const auto model = test::copy_stories(tmp.path());
  test::write_file(model / "tokenizer_config.json",
                   R"({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})");
  Served s("", 1 << 20, model.string());
  auto post = [&](const std::string& target, const json& body) { return call(s.port, "POST", target, body.dump()); };
  const json greedy{{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 0}};
  const Reply plain = post("/v1/completions", greedy);
  REQUIRE(plain.status == 200);
  const json plain_tokens = json::parse(plain.body)["choices"][0]["logprobs"]["tokens"];
  // +100 on one token: greedy takes it at every step; -100 on it then: it never comes.
  json forced = greedy;
  forced["logit_bias"] = {{"300", 100}};
  const Reply f = post("/v1/completions", forced);
  REQUIRE(f.status == 200);
  const json forced_tokens = json::parse(f.body)["choices"][0]["logprobs"]["tokens"];
  REQUIRE(forced_tokens.size() == 6);
  for (const json& t : forced_tokens) CHECK(t == forced_tokens[0]);
  CHECK(forced_tokens != plain_tokens);
  json banned = forced;
  banned["logit_bias"] = {{"300", -100}};
  const Reply b = post("/v1/completions", banned);
  REQUIRE(b.status == 200);
  for (const json& t : json::parse(b.body)["choices"][0]["logprobs"]["tokens"]) CHECK(t != forced_tokens[0]);
  // Chat takes it too, and plain text as the response format; null is no bias.
  const json chat{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}, {"temperature", 0},
                  {"logit_bias", {{"300", 100}}}, {"response_format", {{"type", "text"}}}};
  const Reply c = post("/v1/chat/completions", chat);
  INFO(c.body);
  REQUIRE(c.status == 200);
  const std::string text = json::parse(c.body)["choices"][0]["message"]["content"];
  // The forced token four times, the first with its leading space: what the tokens add after the prompt.
  const std::string piece = forced_tokens[0];
  CHECK(piece == " ha");
  CHECK(text == piece + piece + piece + piece);
  json no_bias = greedy;
  no_bias["logit_bias"] = nullptr;
  CHECK(json::parse(post("/v1/completions", no_bias).body)["choices"][0]["logprobs"]["tokens"] == plain_tokens);
  // Refused, naming the field, each with why.
  auto refusal = [&](const json& bias) {
    json body = greedy;
    body["logit_bias"] = bias;
    const Reply r = post("/v1/completions", body);
    CHECK(r.status == 400);
    const json e = json::parse(r.body)["error"];
    CHECK(e["param"] == "logit_bias");
    return e["message"].get<std::string>();
  };
  CHECK(refusal({{"512", 1}}) == "logit_bias: token id 512 is outside the vocabulary (size 512)");
  CHECK(refusal({{"7", 100.5}}) == "logit_bias: the bias of token 7 must be in [-100, 100], got 100.5");
  CHECK(refusal({{"seven", 1}}) == "logit_bias: keys must be token ids, got \"seven\"");
  CHECK(refusal({{"-3", 1}}) == "logit_bias: keys must be token ids, got \"-3\"");
  CHECK(refusal({{"7", "high"}}) == "logit_bias: the bias of token 7 must be a number, got \"high\"");
  CHECK(refusal({{"7", 1}, {"07", 2}}) == "logit_bias: token id 7 is given twice");
  CHECK(refusal(json::array({1, 2})) == "logit_bias: must be an object from token ids to biases, got an array");
  // JSON mode: the reply begins a JSON object (closed: it parses as one); ignore_eos is refused with it.
  json object_mode = chat;
  object_mode.erase("logit_bias");
  object_mode["max_tokens"] = 30;
  object_mode["response_format"] = {{"type", "json_object"}};
  const Reply j = post("/v1/chat/completions", object_mode);
  REQUIRE(j.status == 200);
  const json choice = json::parse(j.body)["choices"][0];
  const std::string content = choice["message"]["content"];
  structured::JsonMatcher matcher;
  size_t fed = 0;
  while (fed < content.size() && matcher.feed(static_cast<uint8_t>(content[fed]))) ++fed;
  CHECK(fed == content.size());
  if (choice["finish_reason"] == "stop") CHECK(json::parse(content).is_object());
  // json_schema: the reply is an object of the schema (its properties in the schema's order, as the body gave
  // them, an integer within its bounds); a schema the engine cannot enforce is refused naming the keyword.
  using ordered = nlohmann::ordered_json;  // the body as written: the schema's properties in their order
  ordered schema = object_mode;
  schema["max_tokens"] = 80;
  schema["response_format"] = ordered::parse(R"({"type": "json_schema", "json_schema": {"name": "pet", "strict": true,
      "schema": {"type": "object", "properties": {"zebra": {"type": "boolean"},
      "age": {"type": "integer", "minimum": 3, "maximum": 9},
      "name": {"type": "string", "maxLength": 5}}, "required": ["zebra", "age", "name"]}}})");
  const Reply js = call(s.port, "POST", "/v1/chat/completions", schema.dump());
  REQUIRE(js.status == 200);
  const json schema_choice = json::parse(js.body)["choices"][0];
  const std::string object_text = schema_choice["message"]["content"];
  INFO(object_text);
  CHECK(schema_choice["finish_reason"] == "stop");
  CHECK(object_text.find("\"zebra\"") < object_text.find("\"age\""));
  const json object = json::parse(object_text);
  CHECK(object["zebra"].is_boolean());
  CHECK(object["age"].is_number_integer());
  CHECK(object["age"].get<int>() >= 3);
  CHECK(object["age"].get<int>() <= 9);
  CHECK(object["name"].get<std::string>().size() <= 5);
  schema["response_format"]["json_schema"]["schema"]["properties"]["age"]["multipleOf"] = 2;
  const Reply unsupported = call(s.port, "POST", "/v1/chat/completions", schema.dump());
  CHECK(unsupported.status == 400);
  CHECK(json::parse(unsupported.body)["error"]["param"] == "response_format");
  CHECK_THAT(json::parse(unsupported.body)["error"]["message"].get<std::string>(),
             Catch::StartsWith("response_format: json_schema.schema: multipleOf is not supported") &&
                 Catch::EndsWith("(at /properties/age)"));
  schema["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "a"}}}};
  CHECK(call(s.port, "POST", "/v1/chat/completions", schema.dump()).status == 400);
  schema["response_format"] = "text";
  CHECK(call(s.port, "POST", "/v1/chat/completions", schema.dump()).status == 400);
  object_mode["ignore_eos"] = true;
  const Reply endless = post("/v1/chat/completions", object_mode);
  CHECK(endless.status == 400);
  CHECK(json::parse(endless.body)["error"]["param"] == "ignore_eos");
  CHECK(post("/v1/completions", greedy).status == 200);  // still serving
}

TEST_CASE("serve - a reasoning model's <think> block is reasoning_content - chat_template_kwargs reach the template",
          "[serve][reasoning]") {
  // stories260K with a template that opens the block in the generation prompt (as DeepSeek R1's does) unless
  // enable_thinking is false (then it writes an empty one, as Qwen3's does).
  test::TempDir tmp;
  const auto model = test::copy_stories(tmp.path());
  test::write_file(model / "tokenizer_config.json",
                   R"({"chat_template": "{% for m in messages %}{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% else %}<think>{% endif %}{% endif %}"})");
  Served s("", 1 << 20, model.string());
  auto post = [&](const json& body) { return call(s.port, "POST", "/v1/chat/completions", body.dump()); };
  const json base{{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}, {"max_tokens", 12},
                  {"temperature", 0}};
  const Reply thinking = post(base);
  REQUIRE(thinking.status == 200);
  const json m = json::parse(thinking.body)["choices"][0]["message"];
  // Cut off by max_tokens inside the block: all of it is reasoning.
  CHECK(m["reasoning_content"].is_string());
  CHECK_FALSE(m["reasoning_content"].get<std::string>().empty());
  CHECK(m["content"] == "");
  json off = base;
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  const Reply answer = post(off);
  REQUIRE(answer.status == 200);
  const json a = json::parse(answer.body)["choices"][0]["message"];
  CHECK(a["reasoning_content"].is_null());
  CHECK_FALSE(a["content"].get<std::string>().empty());
  // Streamed: the reasoning deltas add up to the whole reply's.
  json streamed = base;
  streamed["stream"] = true;
  const Reply st = post(streamed);
  REQUIRE(st.status == 200);
  std::string reasoning, content;
  for (const std::string& e : events_of(st.body)) {
    if (e == "[DONE]") continue;
    const json delta = json::parse(e)["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  CHECK(reasoning == m["reasoning_content"].get<std::string>());
  CHECK(content.empty());
  // A reply constrained to JSON is not split: it is the JSON.
  json jsonmode = base;
  jsonmode["response_format"] = {{"type", "json_object"}};
  jsonmode["max_tokens"] = 40;
  const json j = json::parse(post(jsonmode).body)["choices"][0]["message"];
  CHECK_FALSE(j.contains("reasoning_content"));
  CHECK(j["content"].get<std::string>().find('{') != std::string::npos);
  // Bad kwargs are refused naming the field.
  json bad = base;
  bad["chat_template_kwargs"] = {{"messages", json::array()}};
  const Reply refused = post(bad);
  CHECK(refused.status == 400);
  CHECK(json::parse(refused.body)["error"]["param"] == "chat_template_kwargs");
  bad["chat_template_kwargs"] = 3;
  CHECK(post(bad).status == 400);
}

TEST_CASE("serve - a client that disconnects mid-stream cancels its request", "[serve]") {
  Served s;
  asio::io_context ioc;
  {
    beast::tcp_stream stream(ioc);
    stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(s.port)));
    http::request<http::string_body> req(http::verb::post, "/v1/completions", 11);
    req.set(http::field::host, "127.0.0.1");
    req.body() = R"({"prompt":[1],"max_tokens":100000,"ignore_eos":true,"temperature":0,"stream":true})";
    req.prepare_payload();
    http::write(stream, req);
    char buf[256];
    stream.socket().read_some(asio::buffer(buf));  // the stream has started
    CHECK(s.engine->num_in_flight() == 1);
  }  // closed
  for (int i = 0; i < 500 && s.engine->num_in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(s.engine->num_in_flight() == 0);
}

TEST_CASE("actord serve - answers on the port it prints - SIGTERM exits 0 with its worker process", "[serve][process]") {
  test::TempDir tmp;
  const auto out = tmp.path() / "out";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    freopen(out.c_str(), "w", stdout);
    freopen("/dev/null", "w", stderr);
    const std::string config = (test::source_dir() / "configs/quickstart-2proc.yaml").string();
    execl(test::actord_binary().c_str(), "actord", "serve", config.c_str(), "--port", "0", nullptr);
    _exit(127);
  }
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(out);
    std::string line;
    if (std::getline(in, line) && line.find("http://127.0.0.1:") != std::string::npos)
      port = std::stoi(line.substr(line.rfind(':') + 1));
  }
  REQUIRE(port > 0);
  const std::vector<pid_t> workers = test::worker_processes_of(pid);
  CHECK(workers.size() == 1);
  auto r = call(port, "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
  CHECK(r.status == 200);
  CHECK(json::parse(r.body)["choices"][0]["text"] == ", there was a little girl");
  kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Its worker process went with it (reaped before actord exited), and the sockets of their links.
  CHECK(test::worker_processes_of(pid).empty());
  CHECK(test::worker_links_of(pid).empty());
}

TEST_CASE("serve - plain curl sees Server-Sent Events framed as the spec says", "[serve][curl]") {
  Served s;
  test::TempDir tmp;
  const auto out = tmp.path() / "sse";
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":12,"temperature":0,"stream":true,)"
                           R"("stream_options":{"include_usage":true}})";
  const std::string cmd = "curl -sS -N -i --max-time 60 -H 'Content-Type: application/json' -d '" + body +
                          "' http://127.0.0.1:" + std::to_string(s.port) + "/v1/completions >'" + out.string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(out);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t head_end = raw.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  const std::string head = raw.substr(0, head_end), stream = raw.substr(head_end + 4);
  CHECK_THAT(head, Catch::StartsWith("HTTP/1.1 200") && Catch::Contains("Content-Type: text/event-stream") &&
                       Catch::Contains("Cache-Control: no-cache"));
  // Every event is one "data: <json>" line and a blank line; the last is [DONE]; nothing else is in the stream.
  std::string text;
  size_t events = 0, at = 0;
  bool usage = false, done = false;
  while (at < stream.size()) {
    REQUIRE(stream.compare(at, 6, "data: ") == 0);
    const size_t end = stream.find("\n\n", at);
    REQUIRE(end != std::string::npos);
    const std::string data = stream.substr(at + 6, end - at - 6);
    CHECK(data.find('\n') == std::string::npos);
    at = end + 2;
    ++events;
    if (data == "[DONE]") {
      done = true;
      CHECK(at == stream.size());
      break;
    }
    const auto chunk = json::parse(data);
    CHECK(chunk["object"] == "text_completion");
    if (chunk["choices"].empty()) {
      usage = chunk["usage"]["completion_tokens"] == 12;
    } else {
      text += chunk["choices"][0]["text"].get<std::string>();
    }
  }
  CHECK(done);
  CHECK(usage);
  CHECK(events >= 12 + 2);
  const auto plain = call(s.port, "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":12,"temperature":0})");
  CHECK(text == json::parse(plain.body)["choices"][0]["text"].get<std::string>());
}

TEST_CASE("serve - the official openai client (npm) gets what it expects", "[serve][openai]") {
  // stories260K with a chat template of our own, so that chat completions have one to render (tools included, in
  // the hermes format: tool_choice auto reads <tool_call> tags; only their names, as its context is 512 tokens).
  test::TempDir tmp;
  const auto model = test::copy_stories(tmp.path());
  test::write_file(model / "tokenizer_config.json",
                   R"({"chat_template": "{% if tools %}Call a tool as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>:{% for t in tools %} {{ t.function.name }}{% endfor %}\n{% endif %}{% for m in messages %}{{ m.role }}: {% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"})");
  Served s("sekrit", 1 << 20, model.string());
  const std::string npm = ACTORD_NPM_DIR;
  INFO("the openai client is installed by scripts/setup.sh into " << npm);
  REQUIRE(std::filesystem::exists(npm + "/node_modules/openai"));
  const std::string out = (tmp.path() / "out").string();
  const std::string cmd = "NODE_PATH='" + npm + "/node_modules' node '" +
                          (test::source_dir() / "tests/openai_client/check.cjs").string() + "' http://127.0.0.1:" +
                          std::to_string(s.port) + "/v1 sekrit stories260K >'" + out + "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(out);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(log, Catch::Contains("all checks passed"));
}

namespace {

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& t : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// One streaming client on the test's io_context: sends its request, reads the event stream to its end.
struct StreamClient : std::enable_shared_from_this<StreamClient> {
  beast::tcp_stream stream;
  std::string request;
  std::string received;
  std::array<char, 4096> buffer{};
  bool done = false;
  std::function<void()> on_done;  // optional
  std::chrono::steady_clock::time_point sent;
  std::vector<std::pair<size_t, std::chrono::steady_clock::time_point>> reads;  // bytes received by then
  StreamClient(asio::io_context& ioc, std::string req) : stream(ioc), request(std::move(req)) {}
  // When the byte at `offset` of `received` arrived.
  std::chrono::steady_clock::time_point arrival(size_t offset) const {
    auto it = std::upper_bound(reads.begin(), reads.end(), offset, [](size_t o, const auto& r) { return o < r.first; });
    return it == reads.end() ? reads.back().second : it->second;
  }
  void start(const asio::ip::tcp::endpoint& at) {
    sent = std::chrono::steady_clock::now();
    stream.async_connect(at, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->finish();
      asio::async_write(self->stream, asio::buffer(self->request),
                        [self](beast::error_code ec, size_t) { ec ? self->finish() : self->read(); });
    });
  }
  void read() {
    stream.async_read_some(asio::buffer(buffer), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->received.append(self->buffer.data(), n);
      if (n > 0) self->reads.emplace_back(self->received.size(), std::chrono::steady_clock::now());
      if (ec) return self->finish();
      self->read();
    });
  }
  void finish() {
    done = true;
    if (on_done) on_done();
  }
};

}  // namespace

TEST_CASE("serve - 1,000 concurrent streaming clients all get every token on a bounded number of threads",
          "[serve][load]") {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 8192);
  setrlimit(RLIMIT_NOFILE, &files);
  const size_t clients = files.rlim_cur >= 2200 ? 1000 : (files.rlim_cur - 200) / 2;  // two descriptors per client
  INFO(clients << " clients (descriptor limit " << files.rlim_cur << ")");
  Served s;
  GenerateRequest g;
  g.prompt_ids = {1};
  g.max_tokens = 16;
  g.ignore_eos = true;
  g.sampling.temperature = 0.0f;
  const auto expected = s.engine->generate({g});
  REQUIRE(expected.ok());
  const std::string body = R"({"prompt":[1],"max_tokens":16,"ignore_eos":true,"temperature":0,"stream":true})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const size_t threads_before = thread_count();
  asio::io_context ioc;
  std::vector<std::shared_ptr<StreamClient>> all;
  const asio::ip::tcp::endpoint at(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(s.port));
  for (size_t c = 0; c < clients; ++c) {
    all.push_back(std::make_shared<StreamClient>(ioc, request));
    all.back()->start(at);
  }
  size_t max_threads = threads_before;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (std::chrono::steady_clock::now() < deadline &&
         std::any_of(all.begin(), all.end(), [](const auto& c) { return !c->done; })) {
    ioc.run_for(std::chrono::milliseconds(50));
    max_threads = std::max(max_threads, thread_count());
  }
  size_t complete = 0;
  for (const auto& c : all) {
    auto events = events_of(c->received.substr(std::min(c->received.size(), c->received.find("\r\n\r\n"))));
    std::string text;
    size_t chunks = 0;
    for (const auto& e : events) {
      if (e == "[DONE]") continue;
      text += json::parse(e)["choices"][0]["text"].get<std::string>();
      ++chunks;
    }
    complete += !events.empty() && events.back() == "[DONE]" && chunks == 16 && text == (*expected)[0].text;
  }
  CHECK(complete == clients);
  CHECK(max_threads <= threads_before + 2);  // connections never cost threads
  CHECK(s.engine->num_in_flight() == 0);
}

TEST_CASE("actord bench serve reports every request of a run against the server", "[serve][bench]") {
  Served s;
  test::TempDir tmp;
  const std::string out = (tmp.path() / "out").string();
  const std::string cmd = "'" + test::actord_binary().string() + "' bench serve --url http://127.0.0.1:" +
                          std::to_string(s.port) + " --num-prompts 12 --concurrency 4 --request-rate 50" +
                          " --input-len 8 --output-len 10 --warmup 2 --json >'" + out + "' 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(out);
  const auto report = json::parse(in);
  CHECK(report["completed"] == 12);
  CHECK(report["failed"] == 0);
  CHECK(report["output_tokens_per_s"].get<double>() > 0);
  CHECK(report["ttft_ms"]["p99"].get<double>() >= report["ttft_ms"]["median"].get<double>());
  // A server that is not there: every request fails, exit code 1, the reason reported.
  const std::string down = "'" + test::actord_binary().string() + "' bench serve --url http://127.0.0.1:1 --num-prompts 2 --json >'" +
                           out + "' 2>&1";
  const int status = std::system(down.c_str());
  CHECK(WEXITSTATUS(status) == 1);
  std::ifstream again(out);
  CHECK_THAT(json::parse(again)["first_error"].get<std::string>(), Catch::Contains("connect"));
}

TEST_CASE("actord bench serve runs a JSONL dataset of conversations and draws the run", "[serve][bench]") {
  Served s;
  test::TempDir tmp;
  const auto dataset = tmp.path() / "conversations.jsonl";
  {
    std::ofstream f(dataset);
    f << R"({"conversations": [{"from": "human", "value": "Once upon a time there was a dog named Max."}, )"
         R"({"from": "gpt", "value": "Max liked to play in the park with his red ball."}]})" << "\n"
      << R"({"messages": [{"role": "system", "content": "be kind"}, {"role": "user", "content": "Lily saw a big tree in the park."}, )"
         R"({"role": "assistant", "content": "She sat under it."}]})" << "\n"
      << "\n"
      << R"({"conversations": [{"from": "gpt", "value": "no question here"}]})" << "\n"
      << R"({"prompt": "Tom had a ball.", "output_len": 7})" << "\n";
  }
  const auto tokenizer = Tokenizer::load(test::stories_dir());
  REQUIRE(tokenizer);
  const size_t reply0 = tokenizer->encode("Max liked to play in the park with his red ball.", false).size();
  const size_t reply1 = tokenizer->encode("She sat under it.", false).size();
  const std::string out = (tmp.path() / "out").string(), svg = (tmp.path() / "run.svg").string();
  const std::string base = "'" + test::actord_binary().string() + "' bench serve --url http://127.0.0.1:" +
                           std::to_string(s.port) + " --concurrency 2 --dataset '" + dataset.string() + "'";
  // Measured with the model's tokenizer: each reply's length is the number of tokens generated (ignore_eos), three
  // usable lines cycled over six requests.
  REQUIRE(std::system((base + " --tokenizer '" + test::stories_dir().string() + "' --num-prompts 6 --plot '" + svg +
                       "' --json >'" + out + "' 2>&1").c_str()) == 0);
  std::ifstream in(out);
  const auto report = json::parse(in);
  CHECK(report["completed"] == 6);
  CHECK(report["total_output_tokens"] == 2 * (reply0 + reply1 + 7));
  CHECK(report["total_input_tokens"].get<size_t>() > 6);
  std::ifstream picture(svg);
  const std::string text((std::istreambuf_iterator<char>(picture)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::StartsWith("<?xml") && Catch::Contains("<svg") && Catch::Contains("TTFT") &&
                       Catch::Contains("<polyline") && Catch::EndsWith("</svg>\n"));
  // A line that is not JSON: exit 2 naming the file and line; no request is sent.
  {
    std::ofstream f(dataset, std::ios::app);
    f << "{not json\n";
  }
  const int status = std::system((base + " --num-prompts 100 >'" + out + "' 2>&1").c_str());
  CHECK(WEXITSTATUS(status) == 2);
  std::ifstream error(out);
  CHECK_THAT(std::string(std::istreambuf_iterator<char>(error), {}), Catch::Contains("conversations.jsonl:6"));
}

namespace {

size_t rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) / 1024;
  return 0;
}

}  // namespace

TEST_CASE("serve - load: 64 streaming clients for 60 s - no errors, no lost or duplicated tokens, memory back",
          "[serve][load]") {
  // A KV cache of 32 MiB (1,638 blocks): the prefix cache fills it within the first seconds, so that the pages it
  // touches are part of the baseline.
  Served s("", 1 << 20, "", {"engine.kv_cache_memory=32MiB"});
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> token(3, 511), prompt_len(1, 100), output_len(1, 100);
  struct Finished {
    GenerateRequest request;
    std::string text;
    size_t chunks = 0;
    bool ok = false;  // 200, no error event, ended with [DONE]
  };
  std::vector<double> ttft_ms, itl_ms;  // as the clients saw them: arrival of each token's event
  std::vector<Finished> finished;
  asio::io_context ioc;
  const asio::ip::tcp::endpoint at(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(s.port));
  const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  // The baseline is taken 20 s in, once the KV cache's pages and the allocator's arenas have been touched.
  size_t rss_before = 0;
  asio::steady_timer baseline(ioc, std::chrono::seconds(20));
  baseline.async_wait([&](beast::error_code) { rss_before = rss_mb(); });
  uint64_t next_seed = 1;
  std::function<void()> launch = [&] {
    if (std::chrono::steady_clock::now() >= stop_at) return;
    GenerateRequest g;
    g.prompt_ids = {1};
    for (int t = prompt_len(rng); t > 1; --t) g.prompt_ids.push_back(token(rng));
    g.max_tokens = static_cast<uint32_t>(output_len(rng));
    g.ignore_eos = true;  // every stream must carry exactly max_tokens tokens
    g.sampling.temperature = 0.8f;
    g.sampling.seed = next_seed++;
    json body{{"prompt", g.prompt_ids}, {"max_tokens", g.max_tokens}, {"temperature", 0.8},
              {"seed", g.sampling.seed}, {"ignore_eos", true}, {"stream", true}};
    const std::string text = body.dump();
    auto client = std::make_shared<StreamClient>(
        ioc, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text);
    client->on_done = [&, g, weak = std::weak_ptr<StreamClient>(client)] {
      auto c = weak.lock();
      Finished f{g, {}, 0, c->received.rfind("HTTP/1.1 200", 0) == 0};
      const size_t body_at = c->received.find("\r\n\r\n");
      const auto events = events_of(body_at == std::string::npos ? "" : c->received.substr(body_at));
      size_t search = body_at == std::string::npos ? c->received.size() : body_at;
      std::chrono::steady_clock::time_point last{};
      for (const auto& e : events) {
        search = c->received.find("data: ", search) + 6;
        if (e == "[DONE]") continue;
        auto chunk = json::parse(e);
        if (chunk.contains("error")) f.ok = false;
        else f.text += chunk["choices"][0]["text"].get<std::string>();
        const auto at = c->arrival(search);
        if (f.chunks == 0) ttft_ms.push_back(std::chrono::duration<double, std::milli>(at - c->sent).count());
        else itl_ms.push_back(std::chrono::duration<double, std::milli>(at - last).count());
        last = at;
        ++f.chunks;
      }
      f.ok = f.ok && !events.empty() && events.back() == "[DONE]";
      finished.push_back(std::move(f));
      asio::post(ioc, [&] { launch(); });  // the slot's next request
    };
    client->start(at);
  };
  for (int slot = 0; slot < 64; ++slot) launch();
  ioc.run();
  size_t errors = 0, wrong_counts = 0, tokens = 0;
  std::vector<GenerateRequest> sample;  // every 16th stream is checked against the same request not streamed
  std::vector<const Finished*> sampled;
  for (const auto& f : finished) {
    errors += !f.ok;
    wrong_counts += f.chunks != f.request.max_tokens;
    tokens += f.chunks;
    if (sample.size() * 16 <= &f - finished.data()) {
      sample.push_back(f.request);
      sampled.push_back(&f);
    }
  }
  auto expected = s.engine->generate(sample);
  REQUIRE(expected.ok());
  size_t mismatches = 0;
  for (size_t i = 0; i < sample.size(); ++i) mismatches += sampled[i]->text != (*expected)[i].text;
  const size_t rss_after = rss_mb();
  auto pct = [](std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * double(v.size())))];
  };
  std::printf("load: %zu requests (%.1f/s), %zu tokens (%.0f/s), %zu checked against unstreamed runs, RSS %zu -> %zu MB; "
              "TTFT p50 %.2f p99 %.2f ms, ITL p50 %.2f p99 %.2f ms\n",
              finished.size(), double(finished.size()) / 60.0, tokens, double(tokens) / 60.0, sample.size(),
              rss_before, rss_after, pct(ttft_ms, 50), pct(ttft_ms, 99), pct(itl_ms, 50), pct(itl_ms, 99));
  CHECK(finished.size() > 64);
  CHECK(errors == 0);
  CHECK(wrong_counts == 0);
  CHECK(mismatches == 0);
  CHECK(s.engine->num_in_flight() == 0);
  CHECK(rss_after < rss_before + 48);  // the test's own record of ~30k finished streams grows by ~15 MB
}

TEST_CASE("serve - a full queue answers 429 and frees up as requests finish", "[serve]") {
  Served s("", 1 << 20, "", {}, 2);
  // Two endless streams fill the queue.
  std::vector<std::unique_ptr<beast::tcp_stream>> streams;
  asio::io_context ioc;
  for (int i = 0; i < 2; ++i) {
    auto stream = std::make_unique<beast::tcp_stream>(ioc);
    stream->connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(s.port)));
    http::request<http::string_body> req(http::verb::post, "/v1/completions", 11);
    req.set(http::field::host, "127.0.0.1");
    req.body() = R"({"prompt":[1],"max_tokens":100000,"ignore_eos":true,"stream":true})";
    req.prepare_payload();
    http::write(*stream, req);
    char buf[64];
    stream->socket().read_some(asio::buffer(buf));
    streams.push_back(std::move(stream));
  }
  auto full = call(s.port, "POST", "/v1/completions", R"({"prompt":"x","max_tokens":2})");
  CHECK(full.status == 429);
  CHECK(json::parse(full.body)["error"]["type"] == "rate_limit_error");
  streams.clear();  // the clients go: their requests are cancelled
  for (int i = 0; i < 500 && s.engine->num_in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(call(s.port, "POST", "/v1/completions", R"({"prompt":"x","max_tokens":2})").status == 200);
}

TEST_CASE("serve - /metrics has every series the Grafana dashboard plots", "[serve][metrics]") {
  Served s;
  REQUIRE(call(s.port, "POST", "/v1/completions", R"({"prompt":"Once","max_tokens":4})").status == 200);
  const std::string metrics = call(s.port, "GET", "/metrics").body;
  CHECK_THAT(metrics, Catch::Contains("actord_time_to_first_token_seconds_bucket{model_name=\"stories260K\""));
  CHECK_THAT(metrics, Catch::Contains("actord_request_success_total{model_name=\"stories260K\",replica=\"0\",outcome=\"success\"} 1"));
  // The request was queued once (its queue time observed once) and nothing runs or waits any more.
  CHECK_THAT(metrics, Catch::Contains("actord_request_queue_time_seconds_count{model_name=\"stories260K\",replica=\"0\"} 1"));
  for (const char* gauge : {"actord_num_seqs_running", "actord_num_seqs_waiting", "actord_num_seqs_swapped"})
    CHECK_THAT(metrics, Catch::Contains(std::string(gauge) + "{model_name=\"stories260K\",replica=\"0\"} 0\n"));
  std::ifstream in(test::source_dir() / "examples/grafana/actord-dashboard.json");
  const auto dashboard = json::parse(in);
  size_t series = 0;
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"];
      for (size_t at = expr.find("actord_"); at != std::string::npos; at = expr.find("actord_", at + 1)) {
        const size_t end = expr.find_first_of("{[( ", at);
        const std::string name = expr.substr(at, end - at);
        INFO(name);
        CHECK_THAT(metrics, Catch::Contains(name + "{"));
        ++series;
      }
    }
  }
  CHECK(series >= 10);
}

TEST_CASE("serve - /metrics counts the tokens routed to each expert of each MoE layer (ep2)", "[serve][metrics][ep]") {
  test::TempDir tmp;
  const auto dir = test::model_folder(tmp.path() / "mixtral",
                   R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 128, "num_hidden_layers": 2,
                       "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 256,
                       "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
                       "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32",
                       "bos_token_id": 1, "eos_token_id": 2, "num_local_experts": 4, "num_experts_per_tok": 2})");
  Served s("", 1 << 20, dir.string(),
           {"model.load_format=dummy", "groups[0].tp=2", "groups[0].ep=2", "groups[0].threads=1"});
  REQUIRE(call(s.port, "POST", "/v1/completions", R"({"prompt":"Once","max_tokens":4})").status == 200);
  // The response may come before the result of a step planned ahead (its tokens already counted as fed): read
  // until the engine's counts settle.
  std::vector<uint64_t> routed(2, 0);
  uint64_t fed = 0;
  std::string metrics;
  for (int attempt = 0; attempt < 100; ++attempt) {
    metrics = call(s.port, "GET", "/metrics").body;
    auto stats = s.engine->stats();
    REQUIRE(stats.ok());
    fed = stats->tokens;
    for (int layer = 0; layer < 2; ++layer) {
      routed[size_t(layer)] = 0;
      for (int e = 0; e < 4; ++e) {
        const std::string series = "actord_expert_tokens_total{model_name=\"stories260K\",replica=\"0\",layer=\"" +
                                   std::to_string(layer) + "\",expert=\"" + std::to_string(e) + "\"} ";
        const size_t at = metrics.find(series);
        REQUIRE(at != std::string::npos);
        routed[size_t(layer)] += std::stoull(metrics.substr(at + series.size()));
      }
    }
    if (routed[0] == 2 * fed && routed[1] == 2 * fed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_THAT(metrics, Catch::Contains("# TYPE actord_expert_tokens_total counter"));
  for (int layer = 0; layer < 2; ++layer) CHECK(routed[size_t(layer)] == 2 * fed);  // every token fed, to its top 2
}

TEST_CASE("serve - with speculative decoding, completions and streams equal the server's without it",
          "[serve][speculative]") {
  const std::string body =
      R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":120,"temperature":0,"stop":[" happy"]})";
  std::string text[2], streamed[2], finish[2];
  for (int spec = 0; spec < 2; ++spec) {
    std::vector<std::string> set;
    if (spec)
      set = {"speculative.method=ngram", "speculative.prompt_lookup_min=1", "speculative.disable_by_batch_size=0"};
    Served s("", 1 << 20, "", set);
    auto plain = call(s.port, "POST", "/v1/completions", body);
    REQUIRE(plain.status == 200);
    const auto j = json::parse(plain.body);
    text[spec] = j["choices"][0]["text"];
    finish[spec] = j["choices"][0]["finish_reason"];
    auto stream = call(s.port, "POST", "/v1/completions", body.substr(0, body.size() - 1) + R"(,"stream":true})");
    REQUIRE(stream.status == 200);
    const auto events = events_of(stream.body);
    for (size_t e = 0; e + 1 < events.size(); ++e)
      streamed[spec] += json::parse(events[e])["choices"][0]["text"].get<std::string>();
    if (spec) {
      const std::string metrics = call(s.port, "GET", "/metrics").body;
      CHECK_THAT(metrics, Catch::Contains("# TYPE actord_spec_decode_num_accepted_tokens_total counter"));
      CHECK(s.engine->stats()->accepted_draft_tokens > 0);
    }
  }
  CHECK(text[1] == text[0]);
  CHECK(streamed[0] == text[0]);
  CHECK(streamed[1] == text[0]);
  CHECK(finish[1] == finish[0]);
}
