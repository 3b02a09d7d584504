// An asynchronous HTTP/1.1 server (Boost.Beast on Asio): a few threads serve many connections and long-lived
// Server-Sent Event streams. It knows nothing of the API: every request goes to a handler with an HttpExchange to
// answer it.
//
// Contract: start() binds and returns the port (0 asks for any free one), or an error naming the address.
// The handler runs on a server thread and must not block; it answers through the HttpExchange, from any thread,
// later if it likes: respond() once, or start_events() then events and end_events(). The exchange outlives
// whatever holds it; answers to a connection that has gone are dropped, and on_close (set before start_events)
// tells the holder that the client went away mid-stream. Keep-alive for plain responses; an event stream closes
// its connection when it ends. Bodies above max_body_bytes get 413 without reaching the handler. stop() closes
// the listener and every connection, and joins the threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.hpp"

namespace actord {

struct HttpRequest {
  std::string method;        // GET, POST, ...
  std::string target;        // path and query
  std::string body;
  std::string authorization; // the Authorization header, if any
};

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void respond(int status, std::string content_type, std::string body) = 0;
  // A text/event-stream response: each event is written as "data: <event>\n\n".
  virtual void start_events() = 0;
  virtual void event(std::string data) = 0;
  virtual void end_events() = 0;
  // Called once, from a server thread, when the client closes the connection before the answer is complete.
  virtual void on_close(std::function<void()> callback) = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpExchange>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 2;
  uint64_t max_body_bytes = 1 << 20;
};

class HttpServer {
 public:
  HttpServer();
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  Result<int> start(const HttpServerOptions& options, HttpHandler handler);
  void stop();
  size_t num_connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace actord
