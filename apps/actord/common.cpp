#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "actors/engine.hpp"
#include "apps/actord/commands.hpp"

namespace actord::cli {

void add_common_options(CLI::App* cmd, CommonArgs& args, const std::string& default_log_level, bool trace) {
  args.log_level = default_log_level;
  cmd->add_option("config", args.config, "Topology file (YAML), e.g. configs/quickstart.yaml")->required();
  cmd->add_option("--model", args.model, "Model folder (HF layout); overrides model.path of the topology");
  cmd->add_option("--set", args.set,
                  "Override a topology key by its dotted path, e.g. --set engine.max_num_seqs=8 "
                  "or --set groups[0].placement=process (repeatable)")
      ->take_last();
  cmd->add_option("--log-level", args.log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  if (trace)
    cmd->add_option("--trace", args.trace,
                  "Write a Chrome trace (JSON, for Perfetto) of every step of every rank to this file when the run "
                  "ends: phases per layer, each collective, sampling, idle time");
}

void add_response_format_options(CLI::App* cmd, ResponseFormatArgs& args) {
  cmd->add_option("--response-format", args.format,
                  "text, json_object (JSON mode: the output is one JSON object and ends at its end, or at the token "
                  "limit), json_schema (one value of --json-schema) or regex (a text --regex matches whole, as "
                  "vLLM's guided_regex) or grammar (a sentence of the GBNF grammar in --grammar, as vLLM's "
                  "guided_grammar)")
      ->check(CLI::IsMember({"text", "json_object", "json_schema", "regex", "grammar"}))
      ->capture_default_str();
  cmd->add_option("--json-schema", args.schema_file,
                  "A JSON schema file for --response-format json_schema (as response_format.json_schema.schema)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--regex", args.regex, "The pattern for --response-format regex (Python's re syntax, whole match)");
  cmd->add_option("--grammar", args.grammar_file,
                  "A GBNF grammar file (llama.cpp's format, rule root) for --response-format grammar")
      ->check(CLI::ExistingFile);
}

Status apply_response_format(const ResponseFormatArgs& args, SamplingOptions& o) {
  if ((args.format == "json_schema") != !args.schema_file.empty())
    return Error{Errc::invalid_argument, "--response-format json_schema and --json-schema go together"};
  if ((args.format == "regex") != !args.regex.empty())
    return Error{Errc::invalid_argument, "--response-format regex and --regex go together"};
  if (args.format == "json_object") o.response_format = ResponseFormat::json_object;
  if ((args.format == "grammar") != !args.grammar_file.empty())
    return Error{Errc::invalid_argument, "--response-format grammar and --grammar go together"};
  if (args.format == "regex") {
    o.response_format = ResponseFormat::regex;
    o.regex = args.regex;
  }
  if (args.format == "grammar") {
    std::ifstream in(args.grammar_file);
    o.grammar.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (o.grammar.empty()) return Error{Errc::invalid_argument, "--grammar " + args.grammar_file + ": an empty file"};
    o.response_format = ResponseFormat::grammar;
  }
  if (args.format != "json_schema") return Status::success();
  std::ifstream in(args.schema_file);
  try {
    o.json_schema = nlohmann::ordered_json::parse(in).dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    return Error{Errc::invalid_argument, "--json-schema " + args.schema_file + ": not JSON: " + e.what()};
  }
  o.response_format = ResponseFormat::json_schema;
  return Status::success();
}

Result<TopologyConfig> load_topology_of(const CommonArgs& args) {
  TopologyOverrides overrides;
  overrides.set = args.set;
  if (!args.model.empty()) overrides.model = args.model;
  return load_topology(args.config, overrides);
}

Result<std::string> lora_request_option(const std::string& spec, std::vector<std::string>& set) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) return spec;
  const std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
  if (name.empty() || path.empty() || name.find('.') != std::string::npos)
    return make_error(Errc::invalid_argument, "--lora " + spec + ": expected NAME or NAME=PATH (a name without dots)");
  std::string quoted;  // a YAML single-quoted scalar: any path
  for (char c : std::filesystem::absolute(path).lexically_normal().string()) quoted += c == '\'' ? "''" : std::string(1, c);
  set.push_back("lora.modules." + name + "='" + quoted + "'");
  return name;
}

Result<uint32_t> lora_request_id(const Engine& engine, const std::string& name) {
  if (name.empty()) return 0u;
  if (auto id = engine.lora_adapter(name)) return *id;
  std::string have;
  for (const LoraModule& m : engine.lora_modules()) have += (have.empty() ? "" : ", ") + m.name;
  return make_error(Errc::invalid_argument, "--lora " + name + ": the topology declares no such adapter (lora.modules: " +
                                                (have.empty() ? std::string("none") : have) +
                                                "); give NAME=PATH to declare it");
}

bool apply_log_level(const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    std::fprintf(stderr, "error: --log-level: unknown level '%s' (trace, debug, info, warn, error, critical, off)\n",
                 level.c_str());
    return false;
  }
  spdlog::set_level(parsed);
  return true;
}

int exit_code_for(const Error& error) {
  switch (error.code) {
    case Errc::invalid_argument:
    case Errc::invalid_config:
    case Errc::not_found:
    case Errc::unsupported:
    case Errc::parse_error:
    case Errc::resource_exhausted:
    case Errc::out_of_memory:
      return 2;
    case Errc::worker_failed:
    case Errc::internal:
      return 1;
  }
  return 1;
}

void print_error(const Error& error) { std::fprintf(stderr, "error: %s\n", error.message.c_str()); }

int fail(const Error& error) {
  print_error(error);
  return exit_code_for(error);
}

nlohmann::json step_stats_json(const SchedulerStats& s) {
  const double steps = std::max<double>(1.0, static_cast<double>(s.steps));
  return {{"steps", s.steps},
          {"tokens_fed", s.tokens},
          {"max_seqs_in_step", s.max_seqs_in_step},
          {"preemptions", s.preemptions},
          {"draft_tokens", s.draft_tokens},
          {"accepted_draft_tokens", s.accepted_draft_tokens},
          {"draft_acceptance", s.draft_tokens ? double(s.accepted_draft_tokens) / double(s.draft_tokens) : 0.0},
          {"round_trips_per_step", 1},
          {"steps_planned_ahead", s.steps_planned_ahead},
          {"step_us_mean", double(s.prefill_us + s.decode_us) / steps},
          {"round_trip_us_mean", double(s.round_trip_us) / steps},
          {"worker_compute_us_mean", double(s.worker_compute_us) / steps},
          {"worker_idle_us_mean", double(s.worker_idle_us) / steps},
          {"worker_comm_us_mean", double(s.worker_comm_us) / steps},
          {"scheduler_us_mean", double(s.scheduler_us) / steps},
          {"scheduler_send_us_mean", double(s.scheduler_send_us) / steps}};
}

}  // namespace actord::cli
