// The actord command line as a user runs it: output contract, exit codes, one-line errors, no orphans.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <sstream>

#include "cli_util.hpp"
#include "free_port.hpp"
#include "core/host_cpus.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cuda/cuda_backend.hpp"

using namespace actord;

namespace {

using test::RunResult;
using test::run_actord;
using test::shell_quote;
using test::start_actord;

void check_one_line_error(const RunResult& r, const std::string& expected_part) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("error: ") && Catch::Contains(expected_part));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());
}

}  // namespace

TEST_CASE("generate --json reproduces the reference in one process and in two", "[cli][process]") {
  for (const char* config : {"configs/quickstart.yaml", "configs/quickstart-2proc.yaml"}) {
    INFO(config);
    auto r = run_actord({"generate", config, "--prompt-ids", "1", "--max-tokens", "256", "--temperature", "0",
                         "--json"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j.at("generated_ids").get<std::vector<int32_t>>() == test::reference_ids());
    CHECK(j.at("text").get<std::string>().rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
    CHECK(j.at("ttft_ms").get<double>() > 0);
    CHECK(j.at("decode_tokens_per_s").get<double>() > 0);
    CHECK(r.err.empty());  // quiet by default
    // Normal exit: no worker process of that run, no link of theirs, is left.
    CHECK(test::worker_processes_of(r.pid).empty());
    CHECK(test::worker_links_of(r.pid).empty());
  }
}

TEST_CASE("generate prints text - seeds make it reproducible - flags override the topology", "[cli]") {
  auto a = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "Once upon a time", "--max-tokens", "30",
                       "--seed", "11", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "40"});
  auto b = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "Once upon a time", "--max-tokens", "30",
                       "--seed", "11", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "40",
                       "--set", "engine.max_num_seqs=2", "--model", "models/stories260K"});
  REQUIRE(a.exit_code == 0);
  CHECK(a.out == b.out);
  CHECK(a.out.size() > 20);
  auto greedy = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "", "--max-tokens", "15",
                            "--temperature", "0"});
  REQUIRE(greedy.exit_code == 0);
  CHECK(greedy.out == "Once upon a time, there was a little girl named Lily.\n");
}

TEST_CASE("every subcommand has --help", "[cli]") {
  for (const char* sub : {"generate", "worker", "bench", "tokenize", "detokenize"}) {
    auto r = run_actord({sub, "--help"});
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("--help"));
  }
  auto top = run_actord({"--help"});
  CHECK(top.exit_code == 0);
  CHECK_THAT(top.out, Catch::Contains("generate"));
}

TEST_CASE("generate --n prints one object per sample - reproducible by seed", "[cli][fork]") {
  const std::vector<std::string> args{"generate", "configs/quickstart.yaml", "--prompt", "Once upon a time",
                                      "--max-tokens", "20", "--temperature", "0.9", "--seed", "5", "--n", "3",
                                      "--json"};
  auto r = run_actord(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> samples;
  for (std::string line; std::getline(lines, line);) samples.push_back(nlohmann::json::parse(line));
  REQUIRE(samples.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(samples[i].at("sample_index").get<size_t>() == i);
  CHECK(samples[0].at("generated_ids") != samples[1].at("generated_ids"));
  // Sample 2 is what one sample seeded 5 + 2 gives.
  auto alone = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "Once upon a time", "--max-tokens",
                           "20", "--temperature", "0.9", "--seed", "7", "--json"});
  REQUIRE(alone.exit_code == 0);
  CHECK(nlohmann::json::parse(alone.out).at("generated_ids") == samples[2].at("generated_ids"));
}

TEST_CASE("generate --prompt-logprobs prints one entry per prompt token - the first null", "[cli][prompt_logprobs]") {
  auto r = run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1,403,407,263", "--max-tokens", "2",
                       "--temperature", "0", "--prompt-logprobs", "2", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto prompt = nlohmann::json::parse(r.out).at("prompt_logprobs");
  REQUIRE(prompt.size() == 4);
  CHECK(prompt[0].is_null());
  for (size_t p = 1; p < 4; ++p) {
    CHECK(prompt[p].at("logprob").get<double>() <= 0);
    CHECK(prompt[p].at("top").size() == 2);
  }
}

TEST_CASE("bad input - one clear line on stderr and exit code 2", "[cli]") {
  test::TempDir tmp;
  const auto yaml = [&](const std::string& name, const std::string& text) {
    test::write_file(tmp.path() / name, text);
    return (tmp.path() / name).string();
  };
  const std::vector<std::string> greedy = {"--prompt-ids", "1", "--max-tokens", "4", "--temperature", "0"};
  auto gen = [&](std::vector<std::string> args) {
    std::vector<std::string> all{"generate"};
    all.insert(all.end(), args.begin(), args.end());
    return run_actord(all);
  };
  auto with = [&](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };

  check_one_line_error(gen(with({"configs/quickstart.yaml", "--model", (tmp.path() / "nope").string()}, greedy)),
                       "does not exist");
  auto bad_arch = test::copy_stories(tmp.path());
  test::write_file(bad_arch / "config.json",
                   R"({"architectures": ["FalconForCausalLM"], "hidden_size": 64, "intermediate_size": 172,
                       "num_hidden_layers": 5, "num_attention_heads": 8, "vocab_size": 512})");
  check_one_line_error(gen(with({"configs/quickstart.yaml", "--model", bad_arch.string()}, greedy)),
                       "architecture 'FalconForCausalLM' is not supported");
  check_one_line_error(gen(with({yaml("malformed.yaml", "model: {path: [x\n")}, greedy)), "malformed YAML");
  check_one_line_error(gen(with({yaml("unknown.yaml", "model: {path: m}\nengine: {max_batch: 3}\ngroups: [{}]\n")},
                                greedy)),
                       "engine.max_batch: unknown key");
  check_one_line_error(gen(with({"configs/quickstart.yaml", "--set", "groups[0].tp=3", "--set", "groups[0].oversubscribe=true"}, greedy)),
                       "groups[0].tp: must divide num_attention_heads (8), got 3");
  check_one_line_error(gen(with({"configs/quickstart.yaml", "--set", "groups[0].pp=6", "--set", "groups[0].oversubscribe=true"}, greedy)),
                       "groups[0].pp: must be at most num_hidden_layers (5), got 6");
  check_one_line_error(gen(with({"configs/quickstart.yaml", "--set", "engine.block_size=3"}, greedy)),
                       "engine.block_size: must be a power of two");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1", "--max-tokens", "0"}),
                       "--max-tokens must be at least 1, got 0");
  std::string long_ids = "1";
  for (int i = 0; i < 600; ++i) long_ids += ",5";
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", long_ids, "--max-tokens", "4"}),
                       "the prompt has 601 tokens, more than the context length of 512");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1,x"}), "'x' is not a token id");
  check_one_line_error(gen({"configs/missing.yaml", "--prompt", "hi"}), "cannot read topology file");
  check_one_line_error(gen({"configs/quickstart.yaml"}), "give a prompt");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1", "--top-p", "0"}),
                       "--top-p: must be in (0, 1], got 0");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1", "--temperature", "nan"}),
                       "--temperature: must be finite and >= 0, got nan");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1", "--logprobs", "21"}),
                       "--logprobs: must be at most 20");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1", "--repetition-penalty", "0"}),
                       "--repetition-penalty: must be finite and > 0, got 0");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1", "--n", "0"}),
                       "--n: must be in [1, 128], got 0");
  check_one_line_error(gen(with({"configs/quickstart.yaml", "--n", "9", "--set", "engine.max_num_seqs=8"}, greedy)),
                       "--n: must be at most engine.max_num_seqs (8): the samples run together, got 9");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt-ids", "1", "--top-k", "600"}),
                       "--top-k: must be at most the vocabulary size (512), got 600");
  check_one_line_error(gen(with({"configs/quickstart.yaml", "--set", "scheduler.policy=lifo"}, greedy)),
                       "scheduler.policy: unknown policy 'lifo' (known: fcfs, priority");
  check_one_line_error(gen({"configs/quickstart.yaml", "--prompt", "x", "--frobnicate"}),
                       "The following argument was not expected: --frobnicate");
}

TEST_CASE("a worker whose engine died before it connected (its endpoint refuses) ends at once, saying so", "[cli]") {
  // The engine binds before a node agent starts its worker: a refused connection means the engine is gone, and a
  // worker that waited on would wait for ever.
  const std::string to = "tcp://127.0.0.1:" + std::to_string(test::free_port());
  const std::string from = "tcp://127.0.0.1:" + std::to_string(test::free_port());
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_actord({"worker", "--name", "orphan", "--to-worker", to, "--from-worker", from},
                            std::chrono::seconds(20));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("the engine's endpoint " + to + " refused the connection: the engine is gone"));
  CHECK(seconds < 10);
  WARN("the orphan worker ended after " << seconds << " s");
}

TEST_CASE("bad input to every subcommand - one clear line on stderr and exit code 2", "[cli]") {
  test::TempDir tmp;
  const std::string nowhere = (tmp.path() / "nowhere").string();
  // The command line itself.
  check_one_line_error(run_actord({}), "A subcommand is required");
  check_one_line_error(run_actord({"frobnicate"}), "unknown subcommand 'frobnicate'");
  check_one_line_error(run_actord({"worker"}), "--name is required");
  // generate
  check_one_line_error(run_actord({"generate", "--prompt", "x"}), "config is required");
  check_one_line_error(run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1", "--log-level",
                                   "nonsense"}),
                       "--log-level: unknown level 'nonsense' (trace, debug, info, warn, error, critical, off)");
  check_one_line_error(run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1", "--temperature",
                                   "inf"}),
                       "--temperature: must be finite and >= 0, got inf");
  check_one_line_error(run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1", "--top-p", "nan"}),
                       "--top-p: must be in (0, 1], got nan");
  check_one_line_error(run_actord({"generate", "configs/quickstart.yaml", "--prompt-ids", "1", "--max-tokens",
                                   "many"}),
                       "Could not convert: --max-tokens = many");
  // tokenize / detokenize
  for (const char* sub : {"tokenize", "detokenize"}) {
    INFO(sub);
    check_one_line_error(run_actord({sub}), "--model is required");
    check_one_line_error(run_actord({sub, "--model", nowhere}), "tokenizer file not found: " + nowhere);
    check_one_line_error(run_actord({sub, "--model", "models/stories260K", "--frobnicate"}),
                         "The following argument was not expected: --frobnicate");
  }
  // bench offline
  const std::vector<std::string> offline{"bench", "offline", "--model", "models/stories260K"};
  auto bench = [&](std::vector<std::string> more) {
    std::vector<std::string> all = offline;
    all.insert(all.end(), more.begin(), more.end());
    return run_actord(all);
  };
  check_one_line_error(run_actord({"bench"}), "A subcommand is required");
  check_one_line_error(run_actord({"bench", "offline"}), "--model is required");
  check_one_line_error(run_actord({"bench", "offline", "--model", nowhere}),
                       "model folder " + nowhere + " does not exist");
  check_one_line_error(bench({"--num-prompts", "0"}), "--num-prompts: must be at least 1, got 0");
  check_one_line_error(bench({"--input-len", "-3"}), "--input-len: must be at least 1, got -3");
  check_one_line_error(bench({"--output-len", "0"}), "--output-len: must be at least 1, got 0");
  check_one_line_error(bench({"--shared-prefix-len", "-1"}), "--shared-prefix-len: must be at least 0, got -1");
  check_one_line_error(bench({"--top-k", "-2"}), "--top-k: must be at least 0, got -2");
  check_one_line_error(bench({"--input-len", "500", "--output-len", "100"}),
                       "--input-len + --output-len (600) exceeds the model's context (512)");
  check_one_line_error(bench({"--log-level", "loud"}), "--log-level: unknown level 'loud'");
  // bench serve: refused before any connection is tried
  check_one_line_error(run_actord({"bench", "serve"}), "--url is required");
  for (const char* url : {"ftp://127.0.0.1:8000", "http://", "http://127.0.0.1:port", "http://127.0.0.1:99999"}) {
    check_one_line_error(run_actord({"bench", "serve", "--url", url}),
                         std::string("--url: expected http://host[:port][/prefix] with a port in [1, 65535], got '") +
                             url + "'");
  }
  check_one_line_error(run_actord({"bench", "serve", "--url", "http://127.0.0.1:8000", "--num-prompts", "0"}),
                       "--num-prompts: must be at least 1, got 0");
  check_one_line_error(run_actord({"bench", "serve", "--url", "http://127.0.0.1:8000", "--vocab", "2"}),
                       "--vocab: must be at least 4, got 2");
  // serve: refused before the engine starts
  for (const char* port : {"70000", "-5", "http"}) {
    check_one_line_error(run_actord({"serve", "configs/quickstart.yaml", "--port", port}),
                         std::string("--port: must be a port number in [0, 65535], got '") + port + "'");
  }
  check_one_line_error(run_actord({"serve", "configs/quickstart.yaml", "--log-level", "nonsense"}),
                       "--log-level: unknown level 'nonsense'");
}

TEST_CASE("a worker process that dies at start-up - reported - non-zero exit - no orphan", "[cli][process]") {
  test::TempDir tmp;
  auto model = test::copy_stories(tmp.path());
  std::filesystem::resize_file(model / "model.safetensors", 4096);
  auto r = run_actord({"generate", "configs/quickstart-2proc.yaml", "--model", model.string(), "--prompt-ids", "1",
                       "--max-tokens", "4"});
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::StartsWith("error: ") && Catch::Contains("truncated safetensors file"));
  // Error exit: no worker process of that run, no link of theirs, is left.
  CHECK(test::worker_processes_of(r.pid).empty());
  CHECK(test::worker_links_of(r.pid).empty());
}

TEST_CASE("actord killed with SIGKILL - its worker process goes with it - no link left", "[cli][process]") {
  // actord serve runs until it is stopped: its worker process is there for as long as the test looks for it.
  test::TempDir tmp;
  const pid_t pid = start_actord({"serve", "configs/quickstart-2proc.yaml", "--port", "0"}, tmp.path());
  REQUIRE(pid > 0);
  struct Reaper {  // kills and reaps actord if the test stops early
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  std::vector<pid_t> workers;
  bool ended = false;
  test::eventually([&] {
    workers = test::worker_processes_of(pid);
    ended = workers.empty() && waitpid(pid, nullptr, WNOHANG) == pid;
    return !workers.empty() || ended;
  }, std::chrono::seconds(60));
  if (ended) reaper.pid = -1;
  REQUIRE_FALSE(ended);
  REQUIRE(workers.size() == 1);
  // Both ends have mapped their link (so its name is gone: only the mappings are left to go). An engine killed
  // before that leaves the name, which its next start removes (worker_link_cleanup_test.cpp).
  CHECK(test::eventually([&] { return test::link_mapped_by_both(pid); }, std::chrono::seconds(20)));
  REQUIRE(kill(pid, SIGKILL) == 0);
  REQUIRE(waitpid(pid, nullptr, 0) == pid);
  reaper.pid = -1;
  // The worker dies with its parent, and the memory of their link with both.
  const bool gone = test::eventually([&] { return test::worker_processes_of(pid).empty(); }, std::chrono::seconds(5));
  CHECK(gone);
  const std::vector<std::string> left = test::worker_links_of(pid);
  INFO("left: " << (left.empty() ? std::string() : left.front()));
  CHECK(left.empty());
  for (pid_t w : test::worker_processes_of(pid)) kill(w, SIGKILL);  // never leave one behind, even on failure
}

TEST_CASE("bench offline prints one JSON object with throughput and latency figures", "[cli]") {
  auto r = run_actord({"bench", "offline", "--model", "models/stories260K", "--num-prompts", "4", "--input-len", "16",
                       "--output-len", "8", "--concurrency", "4", "--threads", "1", "--temperature", "0.8",
                       "--top-k", "40", "--top-p", "0.9", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"prefill_tokens_per_s", "decode_tokens_per_s", "output_tokens_per_s", "peak_rss_mb"}) {
    INFO(key);
    CHECK(j.at(key).get<double>() > 0);
  }
  CHECK(j.at("output_tokens").get<int>() == 32);
  CHECK(j.at("top_k").get<int>() == 40);
  for (const char* key : {"ttft_ms", "tpot_ms"}) {
    CHECK(j.at(key).at("p50").get<double>() > 0);
    CHECK(j.at(key).at("p99").get<double>() >= j.at(key).at("p50").get<double>());
  }
  // JSON mode: at most --output-len tokens each, fewer where an object closed.
  auto json_mode = run_actord({"bench", "offline", "--model", "models/stories260K", "--num-prompts", "2", "--input-len",
                               "16", "--output-len", "8", "--concurrency", "2", "--threads", "1", "--response-format",
                               "json_object", "--json"});
  INFO(json_mode.err);
  REQUIRE(json_mode.exit_code == 0);
  auto jm = nlohmann::json::parse(json_mode.out);
  CHECK(jm.at("response_format") == "json_object");
  CHECK(jm.at("output_tokens").get<int>() > 0);
  CHECK(jm.at("output_tokens").get<int>() <= 16);
  auto bad_format = run_actord({"bench", "offline", "--model", "models/stories260K", "--response-format", "yaml"});
  CHECK(bad_format.exit_code != 0);
  CHECK_THAT(bad_format.err, Catch::Contains("--response-format"));
  auto bad = run_actord({"bench", "offline", "--model", "models/stories260K", "--input-len", "500", "--output-len",
                         "100", "--json"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("exceeds the model's context (512)"));
}

TEST_CASE("tokenize and detokenize read and write JSON lines - bad lines get an error line", "[cli][tokenizer]") {
  test::TempDir tmp;
  test::write_file(tmp.path() / "in.jsonl", "{\"text\": \"Once upon a time\"}\nnot json\n{\"ids\": 3}\n");
  const std::string cmd = "cd " + shell_quote(test::source_dir().string()) + " && " +
                          shell_quote(test::actord_binary()) + " tokenize --model models/stories260K < " +
                          shell_quote((tmp.path() / "in.jsonl").string()) + " > " +
                          shell_quote((tmp.path() / "out.jsonl").string());
  const int status = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(status) == 2);  // some lines were bad
  std::ifstream out(tmp.path() / "out.jsonl");
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(out, line)) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].at("ids") == std::vector<int>{1, 403, 407, 261, 378});
  CHECK(lines[1].contains("error"));
  CHECK(lines[2].contains("error"));

  test::write_file(tmp.path() / "ids.jsonl", "{\"ids\": [403, 407, 261, 378]}\n");
  const std::string back = "cd " + shell_quote(test::source_dir().string()) + " && " +
                           shell_quote(test::actord_binary()) + " detokenize --model models/stories260K < " +
                           shell_quote((tmp.path() / "ids.jsonl").string()) + " > " +
                           shell_quote((tmp.path() / "text.jsonl").string());
  CHECK(std::system(back.c_str()) == 0);
  std::ifstream text(tmp.path() / "text.jsonl");
  std::getline(text, line);
  CHECK(nlohmann::json::parse(line).at("text") == "Once upon a time");
}

TEST_CASE("generate --stop ends the text before the stop string", "[cli][stop]") {
  auto r = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "", "--max-tokens", "60", "--temperature",
                       "0", "--stop", "named Lily"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "Once upon a time, there was a little girl \n");
}

TEST_CASE("generate --response-format json_schema prints a document of the schema - bad pairs are refused",
          "[cli][json_schema]") {
  test::TempDir tmp;
  const auto schema = tmp.path() / "schema.json";
  test::write_file(schema, R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
      "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false})");
  auto r = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "Once upon a time", "--max-tokens", "80",
                       "--temperature", "0", "--response-format", "json_schema", "--json-schema", schema.string(),
                       "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto out = nlohmann::json::parse(r.out);
  REQUIRE(out.at("finish_reason") == "stop");
  const auto doc = nlohmann::json::parse(out.at("text").get<std::string>());
  CHECK(doc.size() == 2);
  CHECK(doc.at("name").is_string());
  CHECK(doc.at("age").is_number());  // an integer of any size (a greedy stories260K writes 31 digits)
  const std::string text = out.at("text").get<std::string>();
  const std::string age = text.substr(text.find("\"age\"") + 5);  // after the key
  CHECK(age.find_first_of(".eE") == std::string::npos);
  auto alone = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "Once", "--response-format",
                           "json_schema"});
  CHECK(alone.exit_code == 2);
  CHECK_THAT(alone.err, Catch::Contains("--response-format json_schema and --json-schema go together"));
  auto eos = run_actord({"generate", "configs/quickstart.yaml", "--prompt", "Once", "--response-format",
                         "json_object", "--ignore-eos"});
  CHECK(eos.exit_code == 2);
  CHECK_THAT(eos.err, Catch::Contains("--ignore-eos cannot go with --response-format json_object"));
}

TEST_CASE("tokenize renders messages with the model's chat template", "[cli][tokenizer][chat_template]") {
  test::TempDir tmp;
  test::write_file(tmp.path() / "in.jsonl", R"({"messages": [{"role": "user", "content": "Hello!"}]})"
                                            "\n"
                                            R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false})"
                                            "\n");
  const std::string cmd = "cd " + shell_quote(test::source_dir().string()) + " && " +
                          shell_quote(test::actord_binary()) +
                          " tokenize --model tests/fixtures/tokenizers/qwen3 < " +
                          shell_quote((tmp.path() / "in.jsonl").string()) + " > " +
                          shell_quote((tmp.path() / "out.jsonl").string());
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream out(tmp.path() / "out.jsonl");
  std::string line;
  std::getline(out, line);
  auto first = nlohmann::json::parse(line);
  CHECK(first.at("text") == "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  // <|im_start|> and <|im_end|> are single special tokens, not spelled out.
  CHECK(first.at("ids") == std::vector<int>{151644, 872, 198, 9707, 0, 151645, 198, 151644, 77091, 198});
  std::getline(out, line);
  CHECK(nlohmann::json::parse(line).at("text") == "<|im_start|>user\nHi<|im_end|>\n");
}

TEST_CASE("info prints the CPU, the kernels it runs and the CUDA devices - as text and as JSON", "[cli]") {
  const auto text = run_actord({"info"});
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("cpu: ") && Catch::Contains("extensions: ") &&
                           Catch::Contains("kernels (groups[].cpu_isa: auto = ") && Catch::Contains("cuda: "));
  const auto json = run_actord({"info", "--json"});
  REQUIRE(json.exit_code == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j.at("kernels").at("isa").get<std::string>() == cpu::isa_name(cpu::detected_isa()));
  CHECK(j.at("cpu").at("usable_cores").get<int>() == usable_cpu_cores());
  const auto extensions = j.at("cpu").at("extensions").get<std::vector<std::string>>();
  // What the kernels' own detection says is there, the CPUID reading says too.
  if (cpu::detected_isa() == cpu::Isa::avx512) {
    CHECK(std::find(extensions.begin(), extensions.end(), "avx512f") != extensions.end());
  }
  if (cpu::detected_isa() != cpu::Isa::portable) {
    CHECK(std::find(extensions.begin(), extensions.end(), "avx2") != extensions.end());
  }
#if defined(__x86_64__)
  // Vendor, family and the caches from CPUID where sysfs has none (VMs): every x86 CPU we run on names them.
  const auto& cpu_json = j.at("cpu");
  CHECK((cpu_json.at("vendor") == "GenuineIntel" || cpu_json.at("vendor") == "AuthenticAMD"));
  CHECK(cpu_json.at("family").get<int>() >= 6);
  for (const auto& c : cpu_json.at("caches")) {
    CHECK(c.at("level").get<int>() >= 1);
    CHECK(c.at("level").get<int>() <= 4);
    CHECK(c.at("bytes").get<uint64_t>() >= 1024);
  }
  CHECK(!cpu_json.at("caches").empty());
  if (cpu_json.at("vendor") == "AuthenticAMD" && cpu_json.at("family").get<int>() == 0x1a) {
    CHECK(cpu_json.at("microarchitecture") == "AMD Zen 5");
  }
  CHECK_THAT(text.out, Catch::Contains("family 0x"));
#endif
  // The kernels each kind of weights takes, from the dispatch's own product_path: bf16 weights at one row and at 64.
  cpu::WeightMatrix bf16;
  bf16.dtype = DType::bf16;
  bf16.layout = cpu::WeightLayout::blocked;
  const auto ranges = j.at("kernels").at("products").at("bf16");
  REQUIRE(!ranges.empty());
  CHECK(ranges.front().at("from_rows") == 1);
  CHECK(ranges.front().at("path") == cpu::product_path_name(cpu::product_path(cpu::Isa::automatic, 1, bf16)));
  std::string at_64;
  for (const auto& r : ranges)
    if (r.at("from_rows").get<int>() <= 64) at_64 = r.at("path").get<std::string>();
  CHECK(at_64 == cpu::product_path_name(cpu::product_path(cpu::Isa::automatic, 64, bf16)));
  CHECK_THAT(text.out, Catch::Contains("bf16 weights: 1+ rows "));
  CHECK(j.at("cuda").at("built").get<bool>() == cuda::built_with_cuda());
  CHECK(j.at("cuda").at("devices").size() == static_cast<size_t>(cuda::device_count()));
  CHECK(run_actord({"info", "--bogus"}).exit_code == 2);
}

TEST_CASE("info under ACTORD_CPU_HIDE names what is hidden and what it did not recognise - quantized products say "
          "their instructions", "[cli]") {
  const std::vector<std::pair<std::string, std::string>> hide = {{"ACTORD_CPU_HIDE", "avx_vnni, avx512_vnni,bogus"}};
  const auto text = run_actord({"info"}, std::chrono::seconds(60), hide);
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("hidden by ACTORD_CPU_HIDE: avx_vnni avx512_vnni; not recognised") &&
                           Catch::Contains("bogus"));
  const auto json = run_actord({"info", "--json"}, std::chrono::seconds(60), hide);
  REQUIRE(json.exit_code == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j.at("kernels").at("hidden") == nlohmann::json({"avx_vnni", "avx512_vnni"}));
  CHECK(j.at("kernels").at("hidden_not_recognised") == nlohmann::json({"bogus"}));
  const auto extensions = j.at("cpu").at("extensions").get<std::vector<std::string>>();
  CHECK(std::find(extensions.begin(), extensions.end(), "avx_vnni") == extensions.end());
  CHECK(std::find(extensions.begin(), extensions.end(), "avx512_vnni") == extensions.end());
  if (cpu::detected_isa() != cpu::Isa::portable) {  // no VNNI left: the int8 products are vpmaddubsw's
    CHECK(j.at("kernels").at("products").at("int8").front().at("path") == "int8 (vpmaddubsw)");
    CHECK_THAT(j.at("kernels").at("quantized_gemm").get<std::string>(), Catch::Contains("without VNNI"));
  }
}
