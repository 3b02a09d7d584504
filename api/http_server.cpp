#include "api/http_server.hpp"

#include <utility>  // before Boost 1.74 asio, whose awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <set>

namespace actord {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto kReadTimeout = std::chrono::seconds(60);  // for a request's header and body

}  // namespace

struct HttpServer::Impl {
  std::shared_ptr<asio::io_context> ioc = std::make_shared<asio::io_context>();
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // The acceptor's strand: its accept completions and stop()'s close run there, never at once (a close racing an
  // accept being re-armed on another io thread corrupted the acceptor).
  asio::strand<asio::io_context::executor_type> accept_strand = asio::make_strand(*ioc);
  std::unique_ptr<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::shared_ptr<const HttpHandler> handler;
  HttpServerOptions options;
  std::mutex mutex;                                  // guards sessions
  std::set<std::shared_ptr<class HttpSession>> sessions;  // open connections
  void accept();
};

namespace {

std::string status_line(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " +
         std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
}

}  // namespace

// One connection. Everything but the HttpExchange calls runs on its strand; those post onto it.
class HttpSession : public HttpExchange, public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, HttpServer::Impl* server)
      : ioc_(server->ioc), stream_(std::move(socket)), server_(server), handler_(server->handler),
        max_body_(server->options.max_body_bytes) {}

  void start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

  void respond(int status, std::string content_type, std::string body) override {
    asio::post(stream_.get_executor(), [self = shared_from_this(), status, type = std::move(content_type),
                                        body = std::move(body)]() mutable {
      self->write_response(status, std::move(type), std::move(body));
    });
  }

  void start_events() override {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->answered_ || self->closed_) return;
      self->answered_ = self->streaming_ = true;
      self->queue_.push_back(status_line(200) +
                             "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                             "Connection: close\r\n\r\n");
      self->write_next();
      self->watch_for_close();
    });
  }

  void event(std::string data) override {
    asio::post(stream_.get_executor(), [self = shared_from_this(), data = std::move(data)] {
      if (!self->streaming_ || self->closed_ || self->ending_) return;
      self->queue_.push_back("data: " + data + "\n\n");
      self->write_next();
    });
  }

  void end_events() override {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->streaming_ || self->closed_) return;
      self->ending_ = true;
      self->write_next();
    });
  }

  void on_close(std::function<void()> callback) override {
    asio::post(stream_.get_executor(), [self = shared_from_this(), callback = std::move(callback)]() mutable {
      if (self->closed_ && !self->complete_) return callback();
      self->on_close_ = std::move(callback);
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    // Dropped in any case: the callback's owner usually holds this exchange (a cycle until it goes).
    auto callback = std::move(on_close_);
    on_close_ = nullptr;
    if (!complete_ && callback) callback();
    std::lock_guard lock(server_->mutex);
    server_->sessions.erase(shared_from_this());
  }

  void close_soon() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

 private:
  void read() {
    if (closed_) return;
    answered_ = streaming_ = ending_ = complete_ = false;
    on_close_ = nullptr;
    parser_.emplace();
    parser_->body_limit(max_body_);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(kReadTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      write_response(413, "application/json",
                     R"x({"error":{"message":"the request body is larger than the limit of )x" +
                         std::to_string(max_body_) +
                         R"x( bytes (server.max_request_body)","type":"invalid_request_error","param":null,"code":null}})x");
      return;
    }
    if (ec) return close();  // the client went away, a timeout, or bytes that are not HTTP
    stream_.expires_never();
    const auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    request.body = req.body();
    if (auto auth = req.find(http::field::authorization); auth != req.end()) request.authorization = std::string(auth->value());
    (*handler_)(request, shared_from_this());
  }

  void write_response(int status, std::string content_type, std::string body) {
    if (answered_ || closed_) return;
    answered_ = true;
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::server, "actord");
    res->set(http::field::content_type, content_type);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      self->complete_ = true;
      if (ec || !res->keep_alive()) return self->close();
      self->read();
    });
  }

  // Writes everything queued so far in one gathered write (events that pile up while a write is in flight go out
  // together in the next).
  void write_next() {
    if (writing_ || closed_) return;
    if (queue_.empty()) {
      if (ending_) {
        complete_ = true;
        close();
      }
      return;
    }
    writing_ = true;
    in_flight_.clear();
    for (const std::string& bytes : queue_) in_flight_.emplace_back(asio::buffer(bytes));
    asio::async_write(stream_.socket(), in_flight_,
                      [self = shared_from_this(), written = queue_.size()](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec) return self->close();
                        self->queue_.erase(self->queue_.begin(), self->queue_.begin() + static_cast<long>(written));
                        self->write_next();
                      });
  }

  // While events stream the client sends nothing: a read that ends means it closed the connection.
  void watch_for_close() {
    stream_.socket().async_read_some(asio::buffer(watch_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->watch_for_close();
    });
  }

  std::shared_ptr<asio::io_context> ioc_;  // outlives every session that may still be posted to
  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  std::shared_ptr<const HttpHandler> handler_;
  uint64_t max_body_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> queue_;  // bytes of the event stream not written yet
  std::vector<asio::const_buffer> in_flight_;  // the write in progress: the first entries of queue_
  std::function<void()> on_close_;
  char watch_[512];
  bool keep_alive_ = false;
  bool answered_ = false, streaming_ = false, ending_ = false, writing_ = false;
  bool complete_ = false;  // the answer was written whole
  bool closed_ = false;
};

void HttpServer::Impl::accept() {
  acceptor->async_accept(asio::make_strand(*ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor->is_open()) return;
    if (!ec) {
      // Events are small writes that must leave at once: Nagle's algorithm would hold one back until the client
      // acknowledges the last (up to its delayed-ACK timeout).
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto session = std::make_shared<HttpSession>(std::move(socket), this);
      {
        std::lock_guard lock(mutex);
        sessions.insert(session);
      }
      session->start();
    }
    accept();
  });
}

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::start(const HttpServerOptions& options, HttpHandler handler) {
  impl_->options = options;
  impl_->handler = std::make_shared<const HttpHandler>(std::move(handler));
  const std::string where = options.host + ":" + std::to_string(options.port);
  beast::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec) return make_error(Errc::invalid_config, "server.host: '" + options.host + "' is not an IP address");
  auto acceptor = std::make_unique<tcp::acceptor>(impl_->accept_strand);
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(Errc::invalid_config, "cannot listen on " + where + ": " + ec.message());
  const int port = acceptor->local_endpoint().port();
  impl_->acceptor = std::move(acceptor);
  impl_->work.emplace(impl_->ioc->get_executor());
  impl_->accept();
  for (int t = 0; t < std::max(1, options.threads); ++t) impl_->threads.emplace_back([ioc = impl_->ioc] { ioc->run(); });
  return port;
}

void HttpServer::stop() {
  if (impl_->threads.empty()) return;
  asio::post(impl_->accept_strand, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor->close(ec);
  });
  {
    std::lock_guard lock(impl_->mutex);
    for (const auto& session : impl_->sessions) session->close_soon();
  }
  impl_->work.reset();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  impl_->ioc->stop();
}

size_t HttpServer::num_connections() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->sessions.size();
}

}  // namespace actord
