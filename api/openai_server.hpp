// The OpenAI-compatible API over an Engine: the routes of `actord serve`.
//
// Routes: GET /health (200 once ready, else 503), GET /version, GET /v1/models, GET /metrics (Prometheus text),
// POST /v1/completions and /v1/chat/completions (streaming as Server-Sent Events or not). With an API key every
// /v1 route needs `Authorization: Bearer KEY` (401 otherwise). Errors are OpenAI's JSON error shape: 400 for a bad
// body or field (naming it), 401, 404 for an unknown path or model, 405 for a wrong method, 413 for a body over the
// limit (the HTTP server), 429 when max_queued_requests are in flight already, and a request the engine refuses
// (a prompt longer than the context) 400 with its reason.
// A client that disconnects mid-stream cancels its request. /admin/fleet and /admin/scale: api/admin_routes.hpp.
//
// Contract: handle() never blocks on the engine: answers go out from the engine's callbacks. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "actors/engine.hpp"
#include "api/http_server.hpp"

namespace actord {

struct OpenAiOptions {
  std::string model_name;   // what /v1/models lists and requests may name
  std::string api_key;      // empty: no authentication
  size_t max_queued_requests = 4096;  // requests in flight beyond which new ones get 429
  std::string tool_call_parser = "auto";  // how the model writes tool calls (api/openai_tools.hpp)
  std::string reasoning_parser = "auto";  // auto: replies split at </think> where the template writes <think>;
                                          // none: never (api/openai_reasoning.hpp)
};

class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, OpenAiOptions options);
  ~OpenAiServer();
  void handle(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange);
  void set_ready(bool ready) { ready_ = ready; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> ready_{false};
};

}  // namespace actord
