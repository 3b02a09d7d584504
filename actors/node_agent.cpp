#include "actors/node_agent.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "actors/worker_launch.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/zmq_link.hpp"

namespace actord {
namespace {

std::atomic<bool> agent_stop{false};
void on_stop_signal(int) { agent_stop.store(true); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

wire_msg reply(const std::function<void(wire::AgentReply::Builder)>& fill) {
  return build<wire::AgentReply>([&](wire::AgentReply::Builder out) { fill(out); });
}

wire_msg error_reply(const Error& e) {
  return reply([&](wire::AgentReply::Builder out) { set_error(out.initError(), e); });
}


}  // namespace

int run_node_agent(const NodeAgentArgs& args) {
  std::filesystem::path executable = args.executable;
  if (executable.empty()) {
    std::error_code ec;
    executable = std::filesystem::read_symlink("/proc/self/exe", ec);
  }
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::rep);
  socket.set(zmq::sockopt::linger, 0);
  try {
    socket.bind(args.listen);
  } catch (const zmq::error_t& e) {
    spdlog::error("agent: cannot listen at {}: {}", args.listen, e.what());
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::map<int32_t, std::string> ended;  // pid -> how it ended
  std::map<int32_t, std::string> running;  // pid -> worker name
  spdlog::info("agent: listening at {}", args.listen);
  while (!agent_stop.load()) {
    for (;;) {  // reap
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = running.find(pid);
      const std::string name = it == running.end() ? "?" : it->second;
      ended[pid] = "worker process " + name + " (pid " + std::to_string(pid) + " on " + args.listen + ") " +
                   describe_status(status);
      if (it != running.end()) running.erase(it);
      spdlog::info("agent: {}", ended[pid]);
    }
    auto got = recv_envelope(socket, 100);
    if (!got.ok()) {
      // A REP socket must answer every request, even one it cannot read.
      send_envelope(socket, wire::MessageKind::AGENT_REPLY, "", error_reply(got.error()));
      continue;
    }
    if (!got->has_value()) continue;
    Envelope& env = **got;
    wire_msg answer;
    try {
      WireReader reader(env.body);
      switch (env.kind) {
        case wire::MessageKind::AGENT_SPAWN: {
          auto in = reader.root<wire::AgentSpawn>();
          auto pid = launch_worker({executable, string_of(in.getName()), string_of(in.getToWorker()),
                                    string_of(in.getFromWorker()), string_of(in.getLogLevel()), in.getHeartbeatMs()});
          if (!pid) {
            answer = error_reply(pid.error());
            break;
          }
          running[*pid] = string_of(in.getName());
          spdlog::info("agent: started {} (pid {})", running[*pid], *pid);
          answer = reply([&](wire::AgentReply::Builder out) { out.setPid(*pid); });
          break;
        }
        case wire::MessageKind::AGENT_STATUS:
        case wire::MessageKind::AGENT_KILL: {
          const int32_t pid = reader.root<wire::AgentPid>().getPid();
          const bool known = running.count(pid) > 0;
          if (env.kind == wire::MessageKind::AGENT_KILL && known) ::kill(pid, SIGKILL);
          answer = reply([&](wire::AgentReply::Builder out) {
            out.setPid(pid);
            out.setRunning(known);
            if (!known) out.setExit(ended.count(pid) ? ended[pid] : "is not a worker of this agent");
          });
          break;
        }
        case wire::MessageKind::AGENT_FREE_PORT: {
          auto port = free_local_port(host_of_address(args.listen));
          answer = port ? reply([&](wire::AgentReply::Builder out) { out.setPort(*port); }) : error_reply(port.error());
          break;
        }
        default:
          answer = error_reply(Error{Errc::invalid_argument, "the agent does not take this message"});
      }
    } catch (const std::exception& e) {
      answer = error_reply(Error{Errc::invalid_argument, std::string("malformed request: ") + e.what()});
    }
    send_envelope(socket, wire::MessageKind::AGENT_REPLY, "", answer);
  }
  for (const auto& [pid, name] : running) ::kill(pid, SIGKILL);
  for (const auto& [pid, name] : running) waitpid(pid, nullptr, 0);
  return 0;
}

std::string host_of_address(const std::string& address) {
  std::string rest = address.rfind("tcp://", 0) == 0 ? address.substr(6) : address;
  const size_t colon = rest.rfind(':');
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

std::string NodeAgentClient::host() const { return host_of_address(address_); }

namespace {

// One request to the agent at `address` on a fresh REQ socket; its AgentReply (an error one as an Error).
Result<wire_msg> agent_call(const std::string& address, std::chrono::milliseconds timeout, wire::MessageKind kind,
                            const wire_msg& body) {
  static zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::req);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndtimeo, static_cast<int>(timeout.count()));
  const std::string who = "node agent at " + address;
  try {
    socket.connect(address);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::worker_failed, who + ": " + e.what());
  }
  if (!send_envelope(socket, kind, "", body)) return make_error(Errc::worker_failed, who + " does not answer");
  auto got = recv_envelope(socket, static_cast<int>(timeout.count()));
  if (!got.ok()) return got.error();
  if (!got->has_value())
    return make_error(Errc::worker_failed, who + " did not answer within " + std::to_string(timeout.count()) + " ms");
  wire_msg answer = std::move((*got)->body);
  WireReader reader(answer);
  auto r = reader.root<wire::AgentReply>();
  if (has_error(r.getError())) {
    Error e = get_error(r.getError());
    e.message = who + ": " + e.message;
    return e;
  }
  return answer;
}

}  // namespace

Result<int32_t> NodeAgentClient::spawn(const std::string& name, const std::string& to_worker,
                                       const std::string& from_worker, const std::string& log_level,
                                       uint32_t heartbeat_ms) const {
  auto answer = agent_call(address_, timeout_, wire::MessageKind::AGENT_SPAWN,
                           build<wire::AgentSpawn>([&](wire::AgentSpawn::Builder out) {
                             out.setName(name);
                             out.setToWorker(to_worker);
                             out.setFromWorker(from_worker);
                             out.setLogLevel(log_level);
                             out.setHeartbeatMs(heartbeat_ms);
                           }));
  if (!answer) return answer.error();
  WireReader reader(*answer);
  return reader.root<wire::AgentReply>().getPid();
}

Result<AgentWorkerState> NodeAgentClient::status(int32_t pid) const {
  auto answer = agent_call(address_, timeout_, wire::MessageKind::AGENT_STATUS,
                           build<wire::AgentPid>([&](wire::AgentPid::Builder out) { out.setPid(pid); }));
  if (!answer) return answer.error();
  WireReader reader(*answer);
  auto r = reader.root<wire::AgentReply>();
  return AgentWorkerState{r.getRunning(), string_of(r.getExit())};
}

Status NodeAgentClient::kill(int32_t pid) const {
  auto answer = agent_call(address_, timeout_, wire::MessageKind::AGENT_KILL,
                           build<wire::AgentPid>([&](wire::AgentPid::Builder out) { out.setPid(pid); }));
  if (!answer) return answer.error();
  return {};
}

Result<uint16_t> NodeAgentClient::free_port() const {
  auto answer = agent_call(address_, timeout_, wire::MessageKind::AGENT_FREE_PORT, wire_msg{});
  if (!answer) return answer.error();
  WireReader reader(*answer);
  return static_cast<uint16_t>(reader.root<wire::AgentReply>().getPort());
}

Result<std::string> local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || !found)
    return make_error(Errc::not_found, "cannot resolve " + host);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  freeaddrinfo(found);
  if (fd >= 0) close(fd);
  if (!ok) return make_error(Errc::not_found, "no route to " + host + ": " + std::strerror(errno));
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

Result<uint16_t> free_local_port(const std::string& address) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = 0;
  socklen_t len = sizeof(at);
  const bool ok = fd >= 0 && inet_pton(AF_INET, address.c_str(), &at.sin_addr) == 1 &&
                  bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&at), &len) == 0;
  if (fd >= 0) close(fd);
  if (!ok) return make_error(Errc::internal, "no free tcp port on " + address + ": " + std::strerror(errno));
  return ntohs(at.sin_port);
}

}  // namespace actord
