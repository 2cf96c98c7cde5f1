// Running llmtrain's programs from tests as a user would: a fresh process with its own arguments,
// environment, standard input and working folder, a time limit, and how it ended (its exit status or
// the signal that ended it, and everything it printed).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "llmtrain/core/fs.h"

namespace llmtrain::testing {

/// How a process ended.
struct Outcome {
  bool exited = false;  // by exit(), with `code`
  int code = -1;
  int signal = 0;          // ended by this signal
  bool timed_out = false;  // killed at the time limit
  std::string output;      // stdout and stderr, interleaved
  /// "exit 1", "signal 11", "timed out": for failure messages.
  std::string how() const {
    return timed_out ? "timed out" : exited ? "exit " + std::to_string(code) : "signal " + std::to_string(signal);
  }
};

/// What to run.
struct Command {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (or replacing) this process's environment
  std::string stdin_text;
  std::string cwd;  // empty: this process's
  int timeout_s = 300;
};

/// Runs `cmd` and waits for it (killing it at its time limit).
inline Outcome run(const Command& cmd) {
  const std::string dir = fs::make_temp_dir("llmtrain_run_");
  const std::string in = dir + "/stdin", out = dir + "/output";
  fs::write_file_atomic(in, cmd.stdin_text);
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: only async-signal-safe work and exec
    const int in_fd = ::open(in.c_str(), O_RDONLY), out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in_fd < 0 || out_fd < 0 || (!cmd.cwd.empty() && ::chdir(cmd.cwd.c_str()) != 0)) ::_exit(127);
    ::dup2(in_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    ::setpgid(0, 0);  // its own group: a time-out kills what it started too
    for (const auto& [k, v] : cmd.env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : cmd.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  Outcome o;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(cmd.timeout_s);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      o.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  o.exited = !o.timed_out && WIFEXITED(status);
  o.code = o.exited ? WEXITSTATUS(status) : -1;
  o.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  o.output = fs::read_file(out);
  fs::remove_tree(dir);
  return o;
}

/// The command that runs the sh script `body` in a mount namespace of its own, with a tmpfs of `size`
/// ("4m") mounted at `dir` (an existing folder), so that a test can fill a disk without touching the
/// machine's; the script is written to `script`. Empty where no process may mount one here (the test
/// then skips and says so).
inline std::vector<std::string> in_small_tmpfs(const std::string& dir, const std::string& size, const std::string& body,
                                               const std::string& script) {
  fs::write_file_atomic(script, "mount -t tmpfs -o size=" + size + " tmpfs '" + dir + "' || exit 99\n" + body + "\n");
  for (const std::vector<std::string>& how : {std::vector<std::string>{"unshare", "-m"}, {"unshare", "-Urm"}}) {
    std::vector<std::string> argv = how;
    argv.insert(argv.end(), {"sh", "-c", "mount -t tmpfs -o size=64k tmpfs '" + dir + "'"});
    if (run({argv, {}, "", "", 30}).code == 0) {
      argv = how;
      argv.insert(argv.end(), {"sh", script});
      return argv;
    }
  }
  return {};
}

}  // namespace llmtrain::testing
