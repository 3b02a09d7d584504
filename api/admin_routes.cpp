#include "api/admin_routes.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <nlohmann/json.hpp>

#include "api/openai_protocol.hpp"

namespace actord {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void refuse(const std::shared_ptr<HttpExchange>& ex, int status, const std::string& message, const std::string& param = "") {
  ex->respond(status, "application/json", error_body(ApiError{status, message, param, "invalid_request_error"}));
}

json fleet_json(const FleetInfo& fleet) {
  json replicas = json::array();
  for (const ReplicaInfo& r : fleet.replicas) {
    replicas.push_back({{"index", r.index},
                        {"state", r.state},
                        {"incarnation", r.incarnation},
                        {"ranks", r.ranks},
                        {"pids", r.pids},
                        {"nodes", r.nodes},
                        {"shape", r.shape},
                        {"group", r.group},
                        {"role", r.role},
                        {"last_failure", r.last_failure}});
  }
  return {{"group", fleet.group},
          {"replacements", fleet.replacements},
          {"scaling", fleet.scaling},
          {"change", fleet.change},
          {"router", {{"prefill", fleet.router_prefill}, {"decode", fleet.router_decode}}},
          {"autoscale", fleet.autoscale},
          {"replicas", replicas}};
}

// A POST route's body: a JSON object with no field outside `known`; nullopt once the exchange was answered with
// 405 or 400 saying why.
std::optional<json> post_body(const std::string& path, const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex,
                              std::initializer_list<const char*> known) {
  if (req.method != "POST") return refuse(ex, 405, "use POST for " + path), std::nullopt;
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return refuse(ex, 400, "the body must be a JSON object"), std::nullopt;
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    return refuse(ex, 400, "unknown field '" + key + "' (known: " + list + ")", key), std::nullopt;
  }
  return body;
}

}  // namespace

AdminRoutes::AdminRoutes(Engine& engine, std::string api_key) : engine_(engine), api_key_(std::move(api_key)) {
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      // On a thread of its own that ends with it: a thread that used a CAF scoped_actor and lives on keeps the
      // actor system from shutting down (~actor_system waits for it), and this one lives as long as the server.
      std::thread(std::move(task)).join();
      lock.lock();
    }
  });
}

AdminRoutes::~AdminRoutes() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    tasks_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void AdminRoutes::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_all();
}

bool AdminRoutes::handle(const std::string& path, const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  const bool lora = path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter";
  if (path.rfind("/admin/", 0) != 0 && !lora) return false;
  if (!api_key_.empty() && req.authorization != "Bearer " + api_key_) {
    ex->respond(401, "application/json",
                error_body(ApiError{401, "a valid API key is required (Authorization: Bearer KEY)", "",
                                    "authentication_error"}));
    return true;
  }
  if (path == "/admin/fleet") {
    if (req.method != "GET") return refuse(ex, 405, "use GET for " + path), true;
    post([this, ex] {
      auto fleet = engine_.fleet();
      if (!fleet) return refuse(ex, 500, fleet.error().message);
      ex->respond(200, "application/json", dump(fleet_json(*fleet)));
    });
    return true;
  }
  if (lora) {
    const std::optional<json> posted = post_body(path, req, ex, {"lora_name", "lora_path"});
    if (!posted) return true;
    const json& body = *posted;
    if (!body.contains("lora_name") || !body["lora_name"].is_string())
      return refuse(ex, 400, "lora_name: required, a string", "lora_name"), true;
    const std::string name = body["lora_name"].get<std::string>();
    if (path == "/v1/unload_lora_adapter")
      return refuse(ex, 400, "lora_name: unloading an adapter needs a restart (running requests name adapters by "
                             "their place in lora.modules)", "lora_name"), true;
    if (!body.contains("lora_path") || !body["lora_path"].is_string())
      return refuse(ex, 400, "lora_path: required, the adapter's folder as a string", "lora_path"), true;
    const std::string folder = body["lora_path"].get<std::string>();
    post([this, ex, name, folder] {
      auto added = engine_.add_lora_adapter(name, folder);
      if (!added)
        return refuse(ex, added.error().code == Errc::internal ? 500 : 400, added.error().message,
                      added.error().message.starts_with("lora_name") ? "lora_name" : "lora_path");
      ex->respond(200, "text/plain", "Success: LoRA adapter '" + name + "' added successfully.");
    });
    return true;
  }
  if (path == "/admin/topology") {
    const std::optional<json> posted = post_body(path, req, ex, {"topology", "source"});
    if (!posted) return true;
    const json& body = *posted;
    if (!body.contains("topology") || !body["topology"].is_string())
      return refuse(ex, 400, "topology: required, the topology file's YAML as a string", "topology"), true;
    if (body.contains("source") && !body["source"].is_string())
      return refuse(ex, 400, "source: must be a string (the file's path)", "source"), true;
    const std::string yaml = body["topology"].get<std::string>();
    const std::string source = body.value("source", std::string("(posted topology)"));
    post([this, ex, yaml, source] {
      const auto t0 = std::chrono::steady_clock::now();
      auto applied = engine_.apply(yaml, source);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!applied)
        return refuse(ex, applied.error().code == Errc::internal ? 500 : 400, applied.error().message, "topology");
      ex->respond(200, "application/json", dump({{"applied", *applied}, {"seconds", seconds}}));
    });
    return true;
  }
  if (path != "/admin/scale") return refuse(ex, 404, "no route " + path), true;
  const std::optional<json> posted = post_body(path, req, ex, {"group", "replicas"});
  if (!posted) return true;
  const json& body = *posted;
  std::string group;
  if (body.contains("group")) {
    if (!body["group"].is_string()) return refuse(ex, 400, "group: must be a string", "group"), true;
    group = body["group"].get<std::string>();
  }
  if (!body.contains("replicas")) return refuse(ex, 400, "replicas: required", "replicas"), true;
  const json& replicas = body["replicas"];
  if (!replicas.is_number_integer() || replicas.get<int64_t>() < INT32_MIN || replicas.get<int64_t>() > INT32_MAX)
    return refuse(ex, 400, "replicas: must be an integer", "replicas"), true;
  const int k = static_cast<int>(replicas.get<int64_t>());
  post([this, ex, group, k] {
    std::string name = group;
    if (name.empty()) {
      auto fleet = engine_.fleet();
      if (!fleet) return refuse(ex, 500, fleet.error().message);
      name = fleet->group;
      std::vector<std::string> groups;
      for (const ReplicaInfo& r : fleet->replicas)
        if (std::find(groups.begin(), groups.end(), r.group) == groups.end()) groups.push_back(r.group);
      if (groups.size() > 1) {
        std::string names;
        for (const std::string& g : groups) names += (names.empty() ? "" : ", ") + g;
        return refuse(ex, 400, "group: required, the engine serves several groups (" + names + ")", "group");
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    const Status done = engine_.scale(name, k);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!done) return refuse(ex, done.error().code == Errc::internal ? 500 : 400, done.error().message, "replicas");
    ex->respond(200, "application/json", dump({{"group", name}, {"replicas", k}, {"seconds", seconds}}));
  });
  return true;
}

}  // namespace actord
