// actord scale / status / apply: a running `actord serve`'s admin routes (api/admin_routes.hpp) from the command
// line.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/actord/commands.hpp"
#include "apps/actord/http_client.hpp"

namespace actord::cli {
namespace {

using json = nlohmann::json;

// The server's error message from OpenAI's error shape, or the body as it is.
std::string error_message(const HttpReply& reply) {
  const json j = json::parse(reply.body, nullptr, false);
  if (!j.is_discarded() && j.contains("error") && j["error"].contains("message") && j["error"]["message"].is_string())
    return j["error"]["message"].get<std::string>();
  return "HTTP " + std::to_string(reply.status) + ": " + reply.body;
}

Result<Target> target_of(const std::string& url) {
  auto target = parse_url(url);
  if (!target) return make_error(Errc::invalid_argument, "--url: expected http://host[:port][/prefix], got '" + url + "'");
  return *target;
}

}  // namespace

void add_admin_commands(CLI::App& app, AdminArgs& args) {
  args.scale = app.add_subcommand("scale", "Add or remove data parallel replicas of a running `actord serve`");
  args.scale->add_option("--url", args.url, "The server, e.g. http://127.0.0.1:8000")->required();
  args.scale->add_option("--group", args.group, "The group to resize (default: the only one)");
  args.scale->add_option("--replicas", args.replicas, "How many replicas it should have")->required();
  args.scale->add_option("--api-key", args.api_key, "The server's API key")->envname("ACTORD_API_KEY");
  args.scale->add_option("--timeout", args.timeout_s, "Seconds to wait for the resize (a drain waits for running requests)");
  args.status = app.add_subcommand("status", "Show the replicas of a running `actord serve`");
  args.status->add_option("--url", args.url, "The server, e.g. http://127.0.0.1:8000")->required();
  args.status->add_option("--api-key", args.api_key, "The server's API key")->envname("ACTORD_API_KEY");
  args.status->add_flag("--json", args.json, "Print the server's JSON as it is");
  args.apply = app.add_subcommand("apply", "Reshape a running `actord serve`'s group to an edited topology file");
  args.apply->add_option("--url", args.url, "The server, e.g. http://127.0.0.1:8000")->required();
  args.apply->add_option("file", args.file, "The edited topology (YAML): groups[0] may change, nothing else")->required();
  args.apply->add_option("--api-key", args.api_key, "The server's API key")->envname("ACTORD_API_KEY");
  args.apply->add_option("--timeout", args.timeout_s, "Seconds to wait for the reshape");
}

int run_scale(const AdminArgs& args) {
  auto target = target_of(args.url);
  if (!target) return print_error(target.error()), 2;
  json body = {{"replicas", args.replicas}};
  if (!args.group.empty()) body["group"] = args.group;
  auto reply = http_call(*target, "POST", "/admin/scale", body.dump(), args.api_key, std::chrono::seconds(args.timeout_s));
  if (!reply) return print_error(reply.error()), exit_code_for(reply.error());
  if (reply->status != 200) return print_error({Errc::invalid_argument, error_message(*reply)}), reply->status >= 500 ? 1 : 2;
  const json j = json::parse(reply->body, nullptr, false);
  if (j.is_discarded()) return print_error({Errc::internal, "the server's answer is not JSON: " + reply->body}), 1;
  std::printf("group %s: %d replicas (%.3f s)\n", j.value("group", std::string()).c_str(), j.value("replicas", 0),
              j.value("seconds", 0.0));
  return 0;
}

// The file's text and absolute path go to POST /admin/topology: the server resolves its relative paths against
// that folder, as it did the file it started from.
int run_apply(const AdminArgs& args) {
  auto target = target_of(args.url);
  if (!target) return print_error(target.error()), 2;
  std::ifstream in(args.file);
  if (!in) return print_error({Errc::not_found, args.file + ": cannot read the topology file"}), 2;
  std::stringstream text;
  text << in.rdbuf();
  std::error_code ec;
  const std::filesystem::path source = std::filesystem::absolute(args.file, ec);
  const json body = {{"topology", text.str()}, {"source", source.string()}};
  auto reply = http_call(*target, "POST", "/admin/topology", body.dump(), args.api_key, std::chrono::seconds(args.timeout_s));
  if (!reply) return print_error(reply.error()), exit_code_for(reply.error());
  if (reply->status != 200) return print_error({Errc::invalid_argument, error_message(*reply)}), reply->status >= 500 ? 1 : 2;
  const json j = json::parse(reply->body, nullptr, false);
  if (j.is_discarded()) return print_error({Errc::internal, "the server's answer is not JSON: " + reply->body}), 1;
  std::printf("%s (%.3f s)\n", j.value("applied", std::string()).c_str(), j.value("seconds", 0.0));
  return 0;
}

int run_status(const AdminArgs& args) {
  auto target = target_of(args.url);
  if (!target) return print_error(target.error()), 2;
  auto reply = http_call(*target, "GET", "/admin/fleet", "", args.api_key, std::chrono::seconds(30));
  if (!reply) return print_error(reply.error()), exit_code_for(reply.error());
  if (reply->status != 200) return print_error({Errc::invalid_argument, error_message(*reply)}), reply->status >= 500 ? 1 : 2;
  if (args.json) {
    std::printf("%s\n", reply->body.c_str());
    return 0;
  }
  const json j = json::parse(reply->body, nullptr, false);
  if (j.is_discarded()) return print_error({Errc::internal, "the server's answer is not JSON: " + reply->body}), 1;
  const std::string change = j.value("change", std::string());
  const json router = j.value("router", json::object());
  const std::string prefill = router.value("prefill", std::string()), decode = router.value("decode", std::string());
  const std::string routed = prefill == decode ? "routed by " + prefill
                                               : "prefill routed by " + prefill + ", decode by " + decode;
  std::vector<std::string> names = {j.value("group", std::string())};  // the first group, then those replicas name
  for (const auto& r : j["replicas"]) {
    const std::string g = r.value("group", std::string());
    if (!g.empty() && std::find(names.begin(), names.end(), g) == names.end()) names.push_back(g);
  }
  std::string groups;
  for (const std::string& name : names) groups += (groups.empty() ? "" : ", ") + name;
  std::printf("group%s %s: %zu replicas, %d replaced after a failure, %s%s\n", names.size() > 1 ? "s" : "",
              groups.c_str(), j["replicas"].size(),
              j.value("replacements", 0), routed.c_str(),
              !change.empty() ? (", changing: " + change).c_str() : j.value("scaling", false) ? ", scaling" : "");
  for (const auto& look : j.value("autoscale", json::array()))
    std::printf("  autoscale: %s\n", look.get<std::string>().c_str());
  for (const auto& r : j["replicas"]) {
    const std::string role = r.value("role", std::string("both"));
    std::printf("  replica/%d  %-10s group %s%s, %s, incarnation %d\n", r.value("index", 0),
                r.value("state", std::string()).c_str(), r.value("group", std::string()).c_str(),
                role == "both" || role.empty() ? "" : (" (" + role + ")").c_str(), r.value("shape", std::string()).c_str(),
                r.value("incarnation", 0));
    const auto& ranks = r["ranks"];
    const auto& pids = r["pids"];
    const json nodes = r.value("nodes", json::array());
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::string node = i < nodes.size() ? nodes[i].get<std::string>() : std::string();
      std::printf("    %-28s pid %-8d node %s\n", ranks[i].get<std::string>().c_str(),
                  i < pids.size() ? pids[i].get<int>() : 0, node.empty() ? "local" : node.c_str());
    }
    if (!r.value("last_failure", std::string()).empty())
      std::printf("    last failure: %s\n", r["last_failure"].get<std::string>().c_str());
  }
  return 0;
}

}  // namespace actord::cli
