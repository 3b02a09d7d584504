// actord serve: the OpenAI-compatible HTTP API over the topology's engine.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "actors/engine.hpp"
#include "api/http_server.hpp"
#include "api/openai_server.hpp"
#include "apps/actord/commands.hpp"

namespace actord::cli {

CLI::App* add_serve_command(CLI::App& app, ServeArgs& args) {
  auto* cmd = app.add_subcommand("serve", "Serve the topology's model over an OpenAI-compatible HTTP API");
  add_common_options(cmd, args.common, "warn");
  cmd->add_option("--host", args.host, "Address to bind (default: server.host of the topology, 127.0.0.1)");
  cmd->add_option("--port", args.port, "Port to bind; 0 picks a free one (default: server.port, 8000)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            const bool digits =
                !value.empty() && value.size() <= 5 && value.find_first_not_of("0123456789") == std::string::npos;
            if (digits && std::stoi(value) <= 65535) return "";
            return "must be a port number in [0, 65535], got '" + value + "'";
          },
          "PORT"));
  cmd->add_option("--api-key", args.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 routes (also server.api_key, ACTORD_API_KEY)");
  cmd->add_option("--threads", args.http_threads, "HTTP server threads")->capture_default_str();
  return cmd;
}

int run_serve(const ServeArgs& args) {
  if (!apply_log_level(args.common.log_level)) return 2;
  auto topology = load_topology_of(args.common);
  if (!topology) return fail(topology.error());
  ServerSection server = topology->server;
  if (!args.host.empty()) server.host = args.host;
  if (args.port >= 0) server.port = args.port;
  if (const char* key = std::getenv("ACTORD_API_KEY"); key && *key) server.api_key = key;
  if (!args.api_key.empty()) server.api_key = args.api_key;

  // SIGINT, SIGTERM and SIGHUP (a closed terminal) are waited for by this thread alone: every thread started from
  // here inherits the mask. Each drains and ends normally, so the engine removes its worker processes and their links.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error of that write, not the end of the server

  EngineOptions options;
  options.log_level = args.common.log_level;
  options.trace_path = args.common.trace;
  auto engine = Engine::start(*topology, options);
  if (!engine) return fail(engine.error());
  OpenAiOptions api;
  api.model_name = topology->model.path.filename().string();
  if (api.model_name.empty()) api.model_name = topology->model.path.parent_path().filename().string();
  api.api_key = server.api_key;
  api.max_queued_requests = static_cast<size_t>(server.max_queued_requests);
  api.tool_call_parser = server.tool_call_parser;
  api.reasoning_parser = server.reasoning_parser;
  OpenAiServer openai(**engine, api);
  HttpServer http;
  HttpServerOptions http_options{server.host, server.port, args.http_threads, server.max_request_body};
  auto port = http.start(http_options, [&](const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
    openai.handle(req, std::move(ex));
  });
  if (!port) return fail(port.error());
  openai.set_ready(true);
  std::printf("actord: serving %s on http://%s:%d\n", api.model_name.c_str(), server.host.c_str(), *port);
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("serve: signal {}: draining requests in flight (up to {} s)", signal_number,
               server.shutdown_timeout_s);
  openai.set_ready(false);  // new generation requests get 503 while the running ones finish
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(server.shutdown_timeout_s);
  while ((*engine)->num_in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http.stop();
  engine->reset();  // stops the actors and worker processes while the API still receives their last events
  return 0;
}

}  // namespace actord::cli
