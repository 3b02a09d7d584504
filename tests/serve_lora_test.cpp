// LoRA adapters over the OpenAI-compatible HTTP API: adapters are models (listed, named by a request's `model`,
// counted on /metrics), and vLLM's /v1/load_lora_adapter loads one while serving.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "http_client_util.hpp"
#include "serve_test_util.hpp"
#include "test_util.hpp"

using namespace actord;
using json = nlohmann::json;
using test::call;
using test::events_of;
using test::Served;

TEST_CASE("serve - LoRA adapters are models: listed, completions on one equal the engine's, unknown names get 404",
          "[serve][lora]") {
  test::TempDir tmp;
  const std::filesystem::path adapter = tmp.path() / "tiny-lora";
  REQUIRE(test::make_lora(test::stories_dir(), adapter, 4));
  Served s("", 1 << 20, "", {"lora.modules.tiny-lora=" + adapter.string()});
  auto models = json::parse(call(s.port, "GET", "/v1/models").body);
  REQUIRE(models["data"].size() == 2);
  CHECK(models["data"][1]["id"] == "tiny-lora");
  CHECK(models["data"][1]["parent"] == "stories260K");

  GenerateRequest g;
  g.prompt = "Once upon a time";
  g.max_tokens = 24;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  auto base = s.engine->generate({g});
  g.lora = 1;
  auto adapted = s.engine->generate({g});
  REQUIRE((base.ok() && adapted.ok()));
  CHECK((*base)[0].text != (*adapted)[0].text);
  for (const char* model : {"stories260K", "tiny-lora"}) {
    INFO(model);
    const std::string body = std::string(R"({"model":")") + model +
                             R"(","prompt":"Once upon a time","max_tokens":24,"temperature":0,"ignore_eos":true)";
    const std::string& expected = std::string(model) == "stories260K" ? (*base)[0].text : (*adapted)[0].text;
    auto plain = call(s.port, "POST", "/v1/completions", body + "}");
    REQUIRE(plain.status == 200);
    auto j = json::parse(plain.body);
    CHECK(j["model"] == model);
    CHECK(j["choices"][0]["text"] == expected);
    auto streamed = call(s.port, "POST", "/v1/completions", body + R"(,"stream":true})");
    REQUIRE(streamed.status == 200);
    std::string text;
    for (const auto& e : events_of(streamed.body))
      if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
    CHECK(text == expected);
  }
  auto unknown = call(s.port, "POST", "/v1/completions", R"({"model":"other-lora","prompt":"x","max_tokens":2})");
  CHECK(unknown.status == 404);
  CHECK(unknown.body.find("'tiny-lora'") != std::string::npos);
  CHECK(call(s.port, "POST", "/v1/completions", R"({"model":"tiny-lora","prompt":"x","max_tokens":2})").status == 200);
  CHECK(call(s.port, "GET", "/metrics").body.find("actord_lora_requests_total{model_name=\"stories260K\",replica=\"0\","
                                                 "lora_name=\"tiny-lora\"} 3") != std::string::npos);
}

TEST_CASE("serve - /v1/load_lora_adapter loads an adapter while serving - requests name it afterwards - bad loads "
          "get 400 naming the field", "[serve][lora][apply]") {
  test::TempDir tmp;
  const std::filesystem::path adapter = tmp.path() / "live";
  REQUIRE(test::make_lora(test::stories_dir(), adapter, 4));
  Served s;
  const std::string completion = R"({"model":"live","prompt":"Once upon a time","max_tokens":16,"temperature":0})";
  CHECK(call(s.port, "POST", "/v1/completions", completion).status == 404);  // not loaded yet
  auto loaded = call(s.port, "POST", "/v1/load_lora_adapter",
                     json{{"lora_name", "live"}, {"lora_path", adapter.string()}}.dump());
  REQUIRE(loaded.status == 200);
  CHECK(loaded.body == "Success: LoRA adapter 'live' added successfully.");
  auto models = json::parse(call(s.port, "GET", "/v1/models").body);
  REQUIRE(models["data"].size() == 2);
  CHECK(models["data"][1]["id"] == "live");
  auto served = call(s.port, "POST", "/v1/completions", completion);
  REQUIRE(served.status == 200);
  Served declared("", 1 << 20, "", {"lora.modules.live=" + adapter.string()});  // started with it
  auto expected = call(declared.port, "POST", "/v1/completions", completion);
  REQUIRE(expected.status == 200);
  CHECK(json::parse(served.body)["choices"][0]["text"] == json::parse(expected.body)["choices"][0]["text"]);

  for (const auto& [body, field] : std::vector<std::pair<json, std::string>>{
           {json{{"lora_path", adapter.string()}}, "lora_name"},
           {json{{"lora_name", "live"}, {"lora_path", adapter.string()}}, "lora_name"},    // served already
           {json{{"lora_name", "bad name"}, {"lora_path", adapter.string()}}, "lora_name"},
           {json{{"lora_name", "other"}, {"lora_path", (tmp.path() / "missing").string()}}, "lora_path"},
           {json{{"lora_name", "other"}, {"lora_path", adapter.string()}, {"load_inplace", true}}, "load_inplace"}}) {
    INFO(body.dump());
    auto refused = call(s.port, "POST", "/v1/load_lora_adapter", body.dump());
    CHECK(refused.status == 400);
    CHECK(json::parse(refused.body)["error"]["param"] == field);
  }
  auto unload = call(s.port, "POST", "/v1/unload_lora_adapter", R"({"lora_name":"live"})");
  CHECK(unload.status == 400);
  CHECK(unload.body.find("restart") != std::string::npos);
  CHECK(call(s.port, "POST", "/v1/completions", completion).status == 200);
}
