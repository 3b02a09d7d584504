// The node agent (`actord agent --listen tcp://HOST:PORT`): starts and stops `actord worker` processes on its machine
// when an engine on another machine asks (its topology's nodes[].address names the agent's address).
//
// Protocol (ZeroMQ REQ -> REP at the listen address, envelopes of comms/zmq_link.hpp, one request at a time):
// agentSpawn (AgentSpawn: the worker's name, the tcp endpoints the engine bound, log level, heartbeat) -> AgentReply
// {pid}; agentStatus (AgentPid) -> {running, exit: how it ended}; agentKill (AgentPid) -> {} (SIGKILL);
// agentFreePort -> {port}: a tcp port free on the agent's address now (for a collective group's rank 0 there).
// Workers die with the agent (PR_SET_PDEATHSIG), so a killed agent takes its node's ranks with it and the engine
// sees them go (their heartbeats stop, the agent does not answer). The agent exits 0 on SIGTERM/SIGINT.
//
// node_agent_client: the engine's side, a fresh REQ socket per request with a timeout (an agent that died cannot
// wedge it), and local_address_toward(host): this machine's address on the route to `host`, for binding tcp
// endpoints a worker there can reach.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/status.hpp"

namespace actord {

struct NodeAgentArgs {
  std::string listen;                  // tcp://HOST:PORT
  std::filesystem::path executable;    // the actord binary the workers run (empty: this process's own)
  std::string log_level = "warn";
};

// Serves until SIGTERM or SIGINT; the exit code (0, or 1 when the address cannot be bound).
int run_node_agent(const NodeAgentArgs& args);

struct AgentWorkerState {
  bool running = false;
  std::string exit;  // how it ended, when not running
};

class NodeAgentClient {
 public:
  NodeAgentClient(std::string address, std::chrono::milliseconds timeout) : address_(std::move(address)), timeout_(timeout) {}
  const std::string& address() const { return address_; }
  std::string host() const;  // of the address (tcp://HOST:PORT)

  Result<int32_t> spawn(const std::string& name, const std::string& to_worker, const std::string& from_worker,
                        const std::string& log_level, uint32_t heartbeat_ms) const;
  Result<AgentWorkerState> status(int32_t pid) const;
  Status kill(int32_t pid) const;
  Result<uint16_t> free_port() const;

 private:
  std::string address_;
  std::chrono::milliseconds timeout_;
};

// The host of a tcp://HOST:PORT address (brackets of an IPv6 one removed).
std::string host_of_address(const std::string& address);
// This machine's address on the route to `host` (an IPv4 address or a name), e.g. "10.77.0.1".
Result<std::string> local_address_toward(const std::string& host);
// A tcp port free on `address` of this machine now (bound and released: another process may take it before use).
Result<uint16_t> free_local_port(const std::string& address);

}  // namespace actord
