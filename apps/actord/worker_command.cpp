#include "actors/node_agent.hpp"
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

namespace actord::cli {

CLI::App* add_agent_command(CLI::App& app, AgentArgs& args) {
  auto* cmd = app.add_subcommand("agent", "Run a node agent: start and stop worker processes on this machine for "
                                          "an engine elsewhere whose topology lists this address under nodes:");
  cmd->add_option("--listen", args.listen, "Where to listen: tcp://HOST:PORT (the nodes[].address)")->required();
  cmd->add_option("--log-level", args.log_level, "Log level")->capture_default_str();
  return cmd;
}

int run_agent(const AgentArgs& args) {
  if (!apply_log_level(args.log_level)) return 2;
  if (args.listen.rfind("tcp://", 0) != 0)
    return print_error({Errc::invalid_argument, "--listen: expected tcp://HOST:PORT, got '" + args.listen + "'"}), 2;
  NodeAgentArgs agent;
  agent.listen = args.listen;
  agent.log_level = args.log_level;
  return run_node_agent(agent);
}

}  // namespace actord::cli
