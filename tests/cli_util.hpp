// Running the built actord binary as a user would, for the command-line tests: from the repo root, stdin from
// /dev/null, stdout and stderr captured in files, bounded in time (a run that goes on is killed and fails the test).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "process_util.hpp"
#include "test_util.hpp"

namespace actord::test {

struct RunResult {
  pid_t pid = -1;  // the actord process, gone (reaped) once run_actord returns
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Starts actord with args from the repo root, stdin from /dev/null, stdout and stderr into `dir`/out and `dir`/err,
// with `env` (name, value) set in its environment.
inline pid_t start_actord(const std::vector<std::string>& args, const std::filesystem::path& dir,
                          const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const std::string binary = actord_binary().string(), root = source_dir().string();
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  std::vector<std::string> argv_strings{binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);  // the child must not write out this process's buffered output again
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    const int in = open("/dev/null", O_RDONLY);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || chdir(root.c_str()) != 0)
      _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Runs actord with args (and `env` set) to its end (killed after `limit`); its exit code and what it printed.
inline RunResult run_actord(const std::vector<std::string>& args,
                            std::chrono::seconds limit = std::chrono::seconds(300),
                            const std::vector<std::pair<std::string, std::string>>& env = {}) {
  TempDir tmp;
  RunResult r;
  r.pid = start_actord(args, tmp.path(), env);
  REQUIRE(r.pid > 0);
  int status = 0;
  const bool ended = eventually([&] { return waitpid(r.pid, &status, WNOHANG) == r.pid; }, limit);
  if (!ended) {
    kill(r.pid, SIGKILL);
    waitpid(r.pid, &status, 0);
  }
  CHECK(ended);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream out(tmp.path() / "out"), err(tmp.path() / "err");
  r.out.assign(std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>());
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return r;
}

}  // namespace actord::test
