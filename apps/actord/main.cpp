// actord: the command line. Subcommands: serve, generate, bench offline, bench serve, check, info, tokenize,
// detokenize, scale, status, agent, worker (internal: started by the engine itself).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "apps/actord/commands.hpp"
#include "apps/actord/signal_cleanup.hpp"

int main(int argc, char** argv) {
  CLI::App app{"actord: an actor-based, elastic LLM inference engine"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  // Usage errors are one line, like every other error of the command line; a word that is no subcommand is named.
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    std::string what = e.what();
    const auto extra = failed->remaining();
    if (failed->get_subcommands().empty() && !extra.empty() && what == "A subcommand is required")
      what = "unknown subcommand '" + extra.front() + "'";
    std::replace(what.begin(), what.end(), '\n', ' ');
    return "error: " + what + " (see --help)\n";
  });

  auto logger = spdlog::stderr_color_mt("actord");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  actord::cli::GenerateArgs generate_args;
  auto* generate = actord::cli::add_generate_command(app, generate_args);
  actord::cli::BenchArgs bench_args;
  auto* bench = actord::cli::add_bench_command(app, bench_args);
  actord::cli::BenchServeArgs bench_serve_args;
  auto* bench_serve = actord::cli::add_bench_serve_command(*bench, bench_serve_args);
  actord::cli::TokenizeArgs tokenize_args;
  actord::cli::add_tokenize_commands(app, tokenize_args);
  actord::cli::ServeArgs serve_args;
  auto* serve = actord::cli::add_serve_command(app, serve_args);
  actord::cli::CheckArgs check_args;
  auto* check = actord::cli::add_check_command(app, check_args);
  actord::cli::InfoArgs info_args;
  auto* info = actord::cli::add_info_command(app, info_args);
  actord::cli::WorkerArgs worker_args;
  auto* worker = actord::cli::add_worker_command(app, worker_args);
  actord::cli::AgentArgs agent_args;
  auto* agent = actord::cli::add_agent_command(app, agent_args);
  actord::cli::AdminArgs admin_args;
  actord::cli::add_admin_commands(app, admin_args);
  actord::cli::SimulateArgs simulate_args;
  auto* simulate = actord::cli::add_simulate_command(app, simulate_args);
  actord::cli::CalibrateArgs calibrate_args;
  auto* calibrate = actord::cli::add_calibrate_command(app, calibrate_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;  // usage errors are bad input: exit code 2
  }
  // serve drains on SIGINT/SIGTERM itself (serve_command.cpp); the others that run an engine clean up and die.
  if (generate->parsed() || (bench->parsed() && !bench_serve->parsed())) actord::cli::end_on_signals_after_cleanup();
  if (generate->parsed()) return actord::cli::run_generate(generate_args);
  if (bench_serve->parsed()) return actord::cli::run_bench_serve(bench_serve_args);
  if (bench->parsed()) return actord::cli::run_bench(bench_args);
  if (tokenize_args.tokenize->parsed()) return actord::cli::run_tokenize(tokenize_args, false);
  if (tokenize_args.detokenize->parsed()) return actord::cli::run_tokenize(tokenize_args, true);
  if (serve->parsed()) return actord::cli::run_serve(serve_args);
  if (check->parsed()) return actord::cli::run_check(check_args);
  if (simulate->parsed()) return actord::cli::run_simulate(simulate_args);
  if (calibrate->parsed()) {
    actord::cli::end_on_signals_after_cleanup();
    return actord::cli::run_calibrate(calibrate_args);
  }
  if (info->parsed()) return actord::cli::run_info(info_args);
  if (worker->parsed()) return actord::cli::run_worker(worker_args);
  if (agent->parsed()) return actord::cli::run_agent(agent_args);
  if (admin_args.scale->parsed()) return actord::cli::run_scale(admin_args);
  if (admin_args.status->parsed()) return actord::cli::run_status(admin_args);
  if (admin_args.apply->parsed()) return actord::cli::run_apply(admin_args);
  return 2;
}
