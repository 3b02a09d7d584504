#include "actors/worker_launch.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace actord {

Result<pid_t> launch_worker(const WorkerCommand& command) {
  // Everything the child needs is prepared before fork.
  std::vector<std::string> args = {command.executable.string(), "worker",  "--name",        command.name,
                                   "--to-worker",               command.to_worker, "--from-worker", command.from_worker,
                                   "--log-level",               command.log_level,
                                   "--heartbeat-ms",            std::to_string(command.heartbeat_ms)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment, with OpenBLAS told to start no threads of its own: the worker's pool owns the cores and calls
  // sgemm on its threads (executors/cpu/gemm.cpp); an OpenBLAS thread started at load spins for its first ~0.1 s.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "OPENBLAS_NUM_THREADS=", 21) != 0) env_strings.emplace_back(*e);
  }
  env_strings.emplace_back("OPENBLAS_NUM_THREADS=1");
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return make_error(Errc::internal, std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the process that started it
    if (getppid() != parent) _exit(126);
    // Nothing of the parent's but stdin/out/err: its sockets, files and locks (a `flock` held by whoever started it)
    // must not live on in the worker.
    syscall(SYS_close_range, 3u, ~0u, 0u);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

}  // namespace actord
