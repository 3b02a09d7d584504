// Subcommands of the actord CLI. Each add_* registers its flags on the app; each run_* returns the exit code:
// 0 success, 2 bad input (flags, topology, model folder, prompt), 1 a runtime failure (a worker died).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/percentile.hpp"
#include "core/sampling_options.hpp"
#include "core/scheduler_stats.hpp"
#include "core/status.hpp"
#include "core/topology_config.hpp"

namespace actord {
class Engine;
struct CheckedModel;
}

namespace actord::cli {

struct CommonArgs {
  std::string config;
  std::string model;
  std::vector<std::string> set;
  std::string log_level;
  std::string trace;  // --trace FILE: a Chrome trace of every step of every rank, written when the run ends
};

// The CLI's default sampling: temperature 0.8.
inline SamplingOptions cli_sampling_defaults() {
  SamplingOptions o;
  o.temperature = 0.8f;
  return o;
}

// --response-format, --json-schema, --regex and --grammar (generate, bench offline).
struct ResponseFormatArgs {
  std::string format = "text";  // json_object, json_schema or regex: output ends at its value's end
  std::string schema_file;      // json_schema: the schema's file
  std::string regex;            // regex: the pattern
  std::string grammar_file;     // grammar: the GBNF grammar's file
};

struct GenerateArgs {
  CommonArgs common;
  ResponseFormatArgs response_format;
  std::vector<std::string> prompts;
  std::string prompt_ids;
  int max_tokens = 128;
  SamplingOptions sampling = cli_sampling_defaults();
  bool json = false;
  bool echo = false;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::string lora;  // --lora NAME[=PATH]
};

struct WorkerArgs {
  std::string name;
  std::string to_worker;
  std::string from_worker;
  std::string log_level = "warn";
  int heartbeat_ms = 0;
};

struct BenchArgs {
  std::string config;
  std::string model;
  int num_prompts = 32;
  int input_len = 128;
  int output_len = 64;
  int shared_prefix_len = 0;
  int concurrency = 32;
  int threads = 0;
  std::string load_format = "auto";
  std::string dtype = "auto";
  uint64_t seed = 0;
  float temperature = 0.0f;  // 0: greedy; above 0, request i draws with seed i
  float top_p = 1.0f;
  int top_k = 0;  // 0: all tokens
  std::string lora;  // --lora NAME[=PATH]: every request on that adapter
  ResponseFormatArgs response_format;
  std::vector<std::string> set;
  std::string log_level = "warn";
  std::string trace;  // --trace FILE
  bool json = false;
  CLI::App* offline = nullptr;
};

struct BenchServeArgs {
  std::string url;
  std::string model;
  int num_prompts = 64;
  int concurrency = 64;
  double request_rate = 0;   // requests/s as a Poisson process; 0: all at once
  int input_len = 32;
  int output_len = 200;
  double range_ratio = 0;    // random lengths in [len * (1 - r), len * (1 + r)]
  int vocab = 512;
  std::string dataset;       // JSONL prompts instead of random ids
  std::string tokenizer;     // model folder measuring dataset prompts and replies
  int max_model_len = 4096;
  int warmup = 0;
  bool no_ignore_eos = false;
  uint64_t seed = 0;
  std::string save;
  std::string plot;          // SVG file
  bool no_progress = false;
  bool json = false;
};

// actord simulate: bench serve's random workload flags, played through a topology on a cost profile.
struct SimulateArgs {
  CommonArgs common;
  std::string profile;
  int cores = 0;  // 0: this machine's
  double replica_start = 1.0;  // seconds a replica the autoscaler adds takes to serve
  BenchServeArgs workload;
};

// actord calibrate: a topology's replica shapes measured into a cost profile.
struct CalibrateArgs {
  CommonArgs common;
  std::string output;
  int max_batch = 64;
  std::string from_trace;  // fit this trace's steps instead of running the grid
};

struct ServeArgs {
  CommonArgs common;
  std::string host;   // empty: the topology's server.host
  int port = -1;      // -1: the topology's server.port
  std::string api_key;
  int http_threads = 2;
};

struct AgentArgs {
  std::string listen;
  std::string log_level = "info";
};

struct AdminArgs {
  std::string url;
  std::string group;
  int replicas = 0;
  std::string api_key;
  int timeout_s = 600;
  bool json = false;
  std::string file;  // apply: the edited topology
  CLI::App* scale = nullptr;
  CLI::App* status = nullptr;
  CLI::App* apply = nullptr;
};

struct CheckArgs {
  CommonArgs common;
  bool json = false;
};

struct InfoArgs {
  bool json = false;
};

struct TokenizeArgs {
  std::string model;
  bool no_special = false;
  bool skip_special = false;
  CLI::App* tokenize = nullptr;
  CLI::App* detokenize = nullptr;
};

// Adds CONFIG, --model, --set, --log-level and (for commands that run steps) --trace to a subcommand of a topology.
void add_common_options(CLI::App* cmd, CommonArgs& args, const std::string& default_log_level, bool trace = true);
// Adds --response-format and --json-schema.
void add_response_format_options(CLI::App* cmd, ResponseFormatArgs& args);
// Sets the options' response format (json_schema: the file's schema, compact; the engine refuses one it cannot
// enforce, naming the keyword); an error naming the flag when the two do not go together or the file is not JSON.
Status apply_response_format(const ResponseFormatArgs& args, SamplingOptions& o);
// The topology of CONFIG with --set and --model applied, validated.
Result<TopologyConfig> load_topology_of(const CommonArgs& args);
// --lora NAME or NAME=PATH (generate, bench): the requests run on the LoRA adapter NAME; with PATH it is declared
// too (lora.modules.NAME, appended to `set`, the path made absolute). Returns NAME ("" without the flag).
Result<std::string> lora_request_option(const std::string& spec, std::vector<std::string>& set);
// The GenerateRequest::lora of adapter `name` ("": 0, the base model); an error naming --lora when the topology
// declares no such adapter.
Result<uint32_t> lora_request_id(const Engine& engine, const std::string& name);
// Sets the spdlog level; false (and a message) for an unknown level name.
bool apply_log_level(const std::string& level);
int exit_code_for(const Error& error);
void print_error(const Error& error);
// print_error, then exit_code_for: how a subcommand ends on an error.
int fail(const Error& error);
// A run's scheduler statistics as printed by generate --json and bench: totals and per-step means.
nlohmann::json step_stats_json(const SchedulerStats& stats);

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& args);
int run_generate(const GenerateArgs& args);

CLI::App* add_bench_command(CLI::App& app, BenchArgs& args);
int run_bench(const BenchArgs& args);

void add_tokenize_commands(CLI::App& app, TokenizeArgs& args);
int run_tokenize(const TokenizeArgs& args, bool decode);

CLI::App* add_bench_serve_command(CLI::App& bench, BenchServeArgs& args);
// bench serve's requests (warm-up ones first), drawn from `rng` as its options ask; its arrival gaps are drawn from
// the same generator after them (one per request sent, when --request-rate is set).
struct BenchRequest;
// bench serve's workload flags checked (counts, the range ratio, the rate): an error naming the flag.
Status check_workload(const BenchServeArgs& args);
Result<std::vector<BenchRequest>> make_bench_requests(const BenchServeArgs& args, int count, std::mt19937_64& rng);

int run_bench_serve(const BenchServeArgs& args);

CLI::App* add_simulate_command(CLI::App& app, SimulateArgs& args);
int run_simulate(const SimulateArgs& args);
CLI::App* add_calibrate_command(CLI::App& app, CalibrateArgs& args);
int run_calibrate(const CalibrateArgs& args);

CLI::App* add_serve_command(CLI::App& app, ServeArgs& args);
int run_serve(const ServeArgs& args);

// The checks Engine::start makes of the topology's model folder, in its order, without loading weights or starting
// actors (plugins, policy, config.json, architecture, context length, LoRA adapters, tokenizer).
Result<CheckedModel> check_model_folder(const TopologyConfig& topology);
CLI::App* add_check_command(CLI::App& app, CheckArgs& args);
int run_check(const CheckArgs& args);
CLI::App* add_info_command(CLI::App& app, InfoArgs& args);
int run_info(const InfoArgs& args);

CLI::App* add_worker_command(CLI::App& app, WorkerArgs& args);

CLI::App* add_agent_command(CLI::App& app, AgentArgs& args);
int run_agent(const AgentArgs& args);

void add_admin_commands(CLI::App& app, AdminArgs& args);
int run_scale(const AdminArgs& args);
int run_status(const AdminArgs& args);
int run_apply(const AdminArgs& args);
int run_worker(const WorkerArgs& args);

}  // namespace actord::cli
