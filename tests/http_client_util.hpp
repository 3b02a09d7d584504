// An HTTP client for tests of the served API: one request on a fresh connection, and the data lines of an event
// stream.
#pragma once

#include <utility>  // before Boost 1.74 asio, whose awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace actord::test {

struct Reply {
  int status = 0;
  std::string body;
};

// One request on a fresh connection; the whole answer (an event stream until the server closes it).
inline Reply call(int port, const std::string& method, const std::string& target, const std::string& body = "",
                  const std::string& key = "") {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  http::request<http::string_body> req(method == "POST" ? http::verb::post : http::verb::get, target, 11);
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  beast::error_code ec;
  http::read(stream, buffer, parser, ec);
  REQUIRE((!ec || ec == http::error::end_of_stream || ec == http::error::partial_message));
  return {static_cast<int>(parser.get().result_int()), parser.get().body()};
}

// The data lines of an event stream.
inline std::vector<std::string> events_of(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    REQUIRE(end != std::string::npos);
    events.push_back(body.substr(at + 6, end - at - 6));
    at = end + 2;
  }
  return events;
}

}  // namespace actord::test
