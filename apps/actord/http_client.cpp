#include <utility>  // before Boost 1.74 asio, whose awaitable.hpp uses std::exchange without it

#include "apps/actord/http_client.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace actord::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::optional<Target> parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return std::nullopt;
  std::string rest = url.substr(scheme.size());
  Target t;
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  t.path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!t.path.empty() && t.path.back() == '/') t.path.pop_back();
  const size_t colon = hostport.rfind(':');
  t.host = hostport.substr(0, colon);
  t.port = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
  if (t.host.empty()) return std::nullopt;
  if (t.port.empty() || t.port.size() > 5 || t.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(t.port) < 1 || std::stoi(t.port) > 65535)
    return std::nullopt;
  return t;
}

Result<HttpReply> http_call(const Target& target, const std::string& method, const std::string& route,
                            const std::string& body, const std::string& api_key, std::chrono::seconds timeout) {
  const std::string where = "http://" + target.host + ":" + target.port + target.path + route;
  try {
    asio::io_context ioc;
    asio::ip::tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.expires_after(timeout);
    stream.connect(resolver.resolve(target.host, target.port));
    http::request<http::string_body> req(method == "POST" ? http::verb::post : http::verb::get, target.path + route, 11);
    req.set(http::field::host, target.host);
    if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    return HttpReply{static_cast<int>(res.result_int()), res.body()};
  } catch (const std::exception& e) {
    return make_error(Errc::not_found, "cannot reach " + where + ": " + e.what());
  }
}

}  // namespace actord::cli
