// The OpenAI-compatible server of an engine on quickstart.yaml (stories260K, `set` applied), on a loopback port of
// its own, for the serve tests.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "api/http_server.hpp"
#include "api/openai_server.hpp"
#include "engine_test_util.hpp"

namespace actord::test {

struct Served {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<OpenAiServer> api;
  HttpServer http;
  int port = 0;
  explicit Served(const std::string& key = "", uint64_t max_body = 1 << 20, const std::string& model_dir = "",
                  std::vector<std::string> set = {}, size_t max_queued = 4096) {
    auto cfg = quickstart("configs/quickstart.yaml", std::move(set));
    if (!model_dir.empty()) cfg.model.path = model_dir;
    engine = start_engine(cfg);
    api = std::make_unique<OpenAiServer>(*engine, OpenAiOptions{"stories260K", key, max_queued});
    auto bound = http.start({"127.0.0.1", 0, 2, max_body},
                            [this](const HttpRequest& r, std::shared_ptr<HttpExchange> ex) { api->handle(r, ex); });
    REQUIRE(bound.ok());
    port = *bound;
    api->set_ready(true);
  }
  ~Served() { http.stop(); }
};

}  // namespace actord::test
