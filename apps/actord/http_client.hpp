// The CLI's side of HTTP: server URLs (http://host[:port][/prefix]) and one plain request/response, for the admin
// commands (actord scale, actord status); actord bench serve streams with its own client over the same Target.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "core/status.hpp"

namespace actord::cli {

struct Target {
  std::string host;
  std::string port;
  std::string path;  // base path, e.g. "" or "/prefix" (no trailing slash): routes go under it
};

// http://host:port[/prefix] -> its parts; nothing for anything else (another scheme, no host, a bad port).
std::optional<Target> parse_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};

// One request (`method` `route` under the target's path, a JSON body when non-empty, `Authorization: Bearer
// api_key` when set) and its whole reply; an Error when the server cannot be reached or answers nothing within
// `timeout`.
Result<HttpReply> http_call(const Target& target, const std::string& method, const std::string& route,
                            const std::string& body, const std::string& api_key, std::chrono::seconds timeout);

}  // namespace actord::cli
