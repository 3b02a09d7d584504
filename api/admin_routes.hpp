// The admin routes of `actord serve`: the fleet's shape, and data parallel resize while serving.
//
// - GET /admin/fleet -> {"group", "replacements", "scaling", "replicas": [{"index", "state", "incarnation",
//   "ranks", "pids", "last_failure"}]} (Engine::fleet).
// - POST /admin/scale {"group": NAME (default: the only group; required with several), "replicas": K} -> 200 {"group", "replicas",
//   "seconds"} once the group has K replicas (added ones serving, removed ones drained: Engine::scale); 400 with
//   OpenAI's error shape for a bad body (not JSON, unknown fields, replicas not an integer) or a resize the engine
//   refuses (replicas < 1, an unknown group, more ranks than the cores or memory): the fleet is untouched then.
// - POST /admin/topology {"topology": YAML, "source": the file's path (its relative paths resolve against its
//   folder)} -> 200 {"applied", "seconds"} once the group has the new shape (Engine::apply: `actord apply`); 400
//   for a bad body or a topology the engine refuses (malformed, a change outside groups[0], one the model or the
//   machine cannot take): the fleet is untouched then.
// - POST /v1/load_lora_adapter {"lora_name", "lora_path"} (vLLM's) -> 200 "Success: LoRA adapter 'NAME' added
//   successfully." once the replicas serve it (Engine::add_lora_adapter, a rolling replacement); 400 naming
//   lora_name or lora_path for a bad body, a name served already or an adapter the model cannot take.
//   POST /v1/unload_lora_adapter -> 400: unloading needs a restart.
// With an API key all need `Authorization: Bearer KEY`. The engine calls block (a drain waits for the running
// requests of the removed replicas), so they run on this object's own thread, one at a time, never on the HTTP
// server's threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "actors/engine.hpp"
#include "api/http_server.hpp"

namespace actord {

class AdminRoutes {
 public:
  AdminRoutes(Engine& engine, std::string api_key);
  ~AdminRoutes();  // finishes the admin call in progress
  AdminRoutes(const AdminRoutes&) = delete;
  AdminRoutes& operator=(const AdminRoutes&) = delete;

  // Handles `path` when it is an admin route (true), else leaves it (false).
  bool handle(const std::string& path, const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);

 private:
  void post(std::function<void()> task);

  Engine& engine_;
  std::string api_key_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace actord
