#include "actors/worker_process_main.hpp"
#include "apps/actord/commands.hpp"

namespace actord::cli {

CLI::App* add_worker_command(CLI::App& app, WorkerArgs& args) {
  auto* cmd = app.add_subcommand("worker", "Run one worker in this process (started by actord itself for "
                                           "placement: process; not meant to be run by hand)");
  cmd->add_option("--name", args.name, "Stable actor name of this worker")->required();
  cmd->add_option("--to-worker", args.to_worker, "ZeroMQ endpoint the engine sends on")->required();
  cmd->add_option("--from-worker", args.from_worker, "ZeroMQ endpoint the engine receives on")->required();
  cmd->add_option("--log-level", args.log_level, "Log level")->capture_default_str();
  cmd->add_option("--heartbeat-ms", args.heartbeat_ms, "Send a heartbeat to the engine this often (0: never)")
      ->check(CLI::Range(0, 3600000));
  return cmd;
}

int run_worker(const WorkerArgs& args) {
  if (!apply_log_level(args.log_level)) return 2;
  return run_worker_process(WorkerProcessArgs{args.name, args.to_worker, args.from_worker, args.heartbeat_ms});
}

}  // namespace actord::cli
