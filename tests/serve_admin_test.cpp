// actord scale, status and apply against a running `actord serve`: the fleet resized and reshaped over its admin
// API while it keeps serving, bad resizes, files and bodies refused with their reason.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "cli_util.hpp"
#include "http_client_util.hpp"
#include "process_util.hpp"

using namespace actord;
using json = nlohmann::json;
using test::call;

namespace {

// `actord serve CONFIG --port 0` started in `dir`: its pid, the port it prints on its first line, and its URL.
struct ServeProcess {
  pid_t pid = 0;
  int port = 0;
  std::string url;
};
ServeProcess start_serve(const std::string& config, const std::filesystem::path& dir,
                         const std::vector<std::string>& extra = {}) {
  ServeProcess serve;
  std::vector<std::string> args = {"serve", config, "--port", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  serve.pid = test::start_actord(args, dir);
  REQUIRE(serve.pid > 0);
  REQUIRE(test::eventually([&] {
    std::ifstream in(dir / "out");
    std::string line;
    if (std::getline(in, line) && line.find("http://127.0.0.1:") != std::string::npos)
      serve.port = std::stoi(line.substr(line.rfind(':') + 1));
    return serve.port > 0;
  }, std::chrono::seconds(30)));
  serve.url = "http://127.0.0.1:" + std::to_string(serve.port);
  return serve;
}

// A greedy completion of stories260K through the server at `port` gives its reference text.
void check_greedy_completion(int port) {
  auto r = call(port, "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
  CHECK(r.status == 200);
  CHECK(json::parse(r.body)["choices"][0]["text"] == ", there was a little girl");
}

}  // namespace

TEST_CASE("actord scale and actord status resize a running dp2 serve - bad resizes are refused, it keeps serving",
          "[serve][process][dp][scale]") {
  test::TempDir tmp;
  const auto [pid, port, url] = start_serve("configs/dp2.yaml", tmp.path());
  auto completion = [port = port] { check_greedy_completion(port); };
  completion();
  auto status = test::run_actord({"status", "--url", url});
  CHECK(status.exit_code == 0);
  CHECK_THAT(status.out, Catch::Contains("group main: 2 replicas") && Catch::Contains("replica/1/worker/0"));
  CHECK(test::worker_processes_of(pid).size() == 2);

  auto down = test::run_actord({"scale", "--url", url, "--replicas", "1"});
  CHECK(down.exit_code == 0);
  CHECK_THAT(down.out, Catch::Contains("group main: 1 replicas"));
  CHECK(test::eventually([&] { return test::worker_processes_of(pid).size() == 1; }, std::chrono::seconds(5)));
  completion();

  // Refused, each with its reason; the fleet is untouched.
  for (auto [replicas, group, why] : {std::tuple{"-1", "main", "replicas: must be at least 1, got -1"},
                                     {"0", "main", "must be at least 1, got 0"},
                                     {"2", "other", "unknown group \"other\""},
                                     {"100", "main", "cores"}}) {
    auto bad = test::run_actord({"scale", "--url", url, "--group", group, "--replicas", replicas});
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains(why));
  }
  CHECK(call(port, "POST", "/admin/scale", "{").status == 400);
  CHECK_THAT(call(port, "POST", "/admin/scale", R"({"replicas": "two"})").body, Catch::Contains("must be an integer"));
  CHECK_THAT(call(port, "POST", "/admin/scale", R"({"replicas": 2, "size": 1})").body, Catch::Contains("unknown field 'size'"));
  CHECK(call(port, "POST", "/admin/scale", R"({})").status == 400);
  CHECK(call(port, "GET", "/admin/scale").status == 405);
  CHECK(call(port, "GET", "/admin/nothing").status == 404);
  CHECK(test::worker_processes_of(pid).size() == 1);
  completion();

  auto up = call(port, "POST", "/admin/scale", R"({"group": "main", "replicas": 2})");
  CHECK(up.status == 200);
  auto fleet = json::parse(call(port, "GET", "/admin/fleet").body);
  CHECK(fleet["replicas"].size() == 2);
  CHECK(fleet["replicas"][1]["state"] == "serving");
  completion();
  CHECK(test::run_actord({"status", "--url", "http://127.0.0.1:1"}).exit_code == 2);  // nothing listens there

  kill(pid, SIGTERM);
  int code = 0;
  REQUIRE(test::eventually([&] { return waitpid(pid, &code, WNOHANG) == pid; }, std::chrono::seconds(30)));
  CHECK(WIFEXITED(code));
  CHECK(test::worker_processes_of(pid).empty());
}

TEST_CASE("a prefill group and a decode group serve - status shows their roles and routers, each scales by name, "
          "apply changes a phase's router, metrics count the hand-offs", "[serve][process][disaggregation]") {
  test::TempDir tmp;
  const auto [pid, port, url] =
      start_serve("configs/pd.yaml", tmp.path(),
                  {"--set", "groups[0].oversubscribe=true", "--set", "groups[1].oversubscribe=true", "--set",
                   "groups[0].router=prefix_affinity"});
  check_greedy_completion(port);
  auto status = test::run_actord({"status", "--url", url});
  CHECK(status.exit_code == 0);
  CHECK_THAT(status.out, Catch::Contains("groups prefill, decode: 2 replicas, 0 replaced after a failure, prefill "
                                         "routed by prefix_affinity, decode by least_tokens\n") &&
                             Catch::Contains("group prefill (prefill), tp1 pp1") &&
                             Catch::Contains("group decode (decode), tp1 pp1"));
  CHECK_THAT(call(port, "GET", "/metrics").body, Catch::Contains("actord_prefill_handoffs_total") &&
                                                     Catch::Contains("actord_kv_transfers_total"));
  auto fleet = json::parse(call(port, "GET", "/admin/fleet").body);
  REQUIRE(fleet["replicas"].size() == 2);
  CHECK(fleet["replicas"][0]["role"] == "prefill");
  CHECK(fleet["replicas"][1]["role"] == "decode");
  // Several groups: the group must be named.
  auto unnamed = call(port, "POST", "/admin/scale", R"({"replicas": 2})");
  CHECK(unnamed.status == 400);
  CHECK_THAT(unnamed.body, Catch::Contains("group: required") && Catch::Contains("prefill, decode"));
  auto up = test::run_actord({"scale", "--url", url, "--group", "decode", "--replicas", "2"});
  INFO(up.err);
  CHECK(up.exit_code == 0);
  CHECK_THAT(up.out, Catch::Contains("group decode: 2 replicas"));
  CHECK(test::worker_processes_of(pid).size() == 3);
  // The decode phase by round robin from now on; no replica is rebuilt.
  const auto edited = test::source_dir() / "configs" / ("apply-pd-" + std::to_string(getpid()) + ".yaml");
  test::write_file(edited, "model:\n  path: ../models/stories260K\nengine:\n  max_num_seqs: 64\n  kv_cache_memory: "
                           "64MiB\ngroups:\n  - {name: prefill, role: prefill, placement: process, threads: 1, "
                           "oversubscribe: true, router: prefix_affinity}\n  - {name: decode, role: decode, replicas: 2, "
                           "placement: process, threads: 1, oversubscribe: true, router: round_robin}\n");
  auto applied = test::run_actord({"apply", "--url", url, edited.string()});
  std::filesystem::remove(edited);
  INFO(applied.err);
  CHECK(applied.exit_code == 0);
  CHECK_THAT(applied.out, Catch::Contains("group prefill unchanged; group decode unchanged"));
  CHECK(json::parse(call(port, "GET", "/admin/fleet").body)["router"] ==
        json{{"prefill", "prefix_affinity"}, {"decode", "round_robin"}});
  CHECK(test::worker_processes_of(pid).size() == 3);
  for (int i = 0; i < 4; ++i) check_greedy_completion(port);
  // Each of the 5 completions (8 tokens) was prefilled on the prefill replica and went on with its KV.
  const std::string metrics = call(port, "GET", "/metrics").body;
  for (const char* name : {"actord_prefill_handoffs_total{", "actord_kv_transfers_total{"}) {
    INFO(metrics);
    const size_t at = metrics.find(name);
    REQUIRE(at != std::string::npos);
    const size_t value = metrics.find("} ", at);
    CHECK(std::stod(metrics.substr(value + 2)) == 5);
  }
  kill(pid, SIGTERM);
  int code = 0;
  REQUIRE(test::eventually([&] { return waitpid(pid, &code, WNOHANG) == pid; }, std::chrono::seconds(30)));
  CHECK(test::worker_processes_of(pid).empty());
}

TEST_CASE("actord apply reshapes a running serve to an edited topology - tp2, AFD - bad files and bodies are "
          "refused, it keeps serving", "[serve][process][apply]") {
  test::TempDir tmp;
  const auto [pid, port, url] = start_serve("configs/quickstart-2proc.yaml", tmp.path());
  auto completion = [port = port] { check_greedy_completion(port); };
  completion();
  // Edited copies of quickstart-2proc.yaml (in configs/, so that the model path resolves alike) with other groups.
  std::vector<std::filesystem::path> files;
  auto edited = [&](const std::string& groups) {
    const auto file = test::source_dir() / "configs" /
                      ("apply-test-" + std::to_string(getpid()) + "-" + std::to_string(files.size()) + ".yaml");
    test::write_file(file, "model:\n  path: ../models/stories260K\n  dtype: auto\nengine:\n  max_num_seqs: 64\n"
                           "  max_num_batched_tokens: 2048\n  block_size: 16\n  kv_cache_memory: 64MiB\n"
                           "scheduler:\n  policy: fcfs\ngroups:\n" + groups);
    files.push_back(file);
    return file.string();
  };
  auto applied = test::run_actord({"apply", "--url", url, edited("  - {name: main, tp: 2, placement: process, threads: 1}\n")});
  CHECK(applied.exit_code == 0);
  CHECK_THAT(applied.out, Catch::Contains("group main reshaped"));
  CHECK_THAT(test::run_actord({"status", "--url", url}).out, Catch::Contains("worker/tp1.pp0"));
  CHECK(test::eventually([&] { return test::worker_processes_of(pid).size() == 2; }, std::chrono::seconds(5)));
  completion();
  CHECK(test::run_actord({"apply", "--url", url,
                          edited("  - {name: main, afd: {attention: {workers: 1}, ffn: {workers: 1}}, tbo: true, "
                                 "placement: process, threads: 1}\n")})
            .exit_code == 0);
  CHECK_THAT(test::run_actord({"status", "--url", url}).out, Catch::Contains("/ffn/0"));
  completion();

  // Refused, each with its reason; the fleet is untouched.
  auto bad = test::run_actord({"apply", "--url", url, edited("  - {name: other}\n")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("groups[0].name: the running group is 'main'"));
  auto missing = test::run_actord({"apply", "--url", url, (tmp.path() / "none.yaml").string()});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("cannot read the topology file"));
  CHECK(call(port, "POST", "/admin/topology", "{").status == 400);
  CHECK_THAT(call(port, "POST", "/admin/topology", R"({"topology": 3})").body, Catch::Contains("topology: required"));
  CHECK_THAT(call(port, "POST", "/admin/topology", R"({"topology": "x", "size": 1})").body,
             Catch::Contains("unknown field 'size'"));
  CHECK_THAT(call(port, "POST", "/admin/topology", R"({"topology": "groups: [", "source": "t.yaml"})").body,
             Catch::Contains("t.yaml"));
  CHECK(call(port, "GET", "/admin/topology").status == 405);
  CHECK_THAT(test::run_actord({"status", "--url", url}).out, Catch::Contains("/ffn/0"));
  completion();
  for (const auto& file : files) std::filesystem::remove(file);

  kill(pid, SIGTERM);
  int code = 0;
  REQUIRE(test::eventually([&] { return waitpid(pid, &code, WNOHANG) == pid; }, std::chrono::seconds(30)));
  CHECK(WIFEXITED(code));
  CHECK(test::worker_processes_of(pid).empty());
}
