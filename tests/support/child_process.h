// A child process whose stdout the test reads line by line, with bounded waits.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace testing_support {

class ChildProcess {
 public:
  // Starts `argv` with this process's environment plus `extra_env` ("NAME=value").
  explicit ChildProcess(std::vector<std::string> argv, std::vector<std::string> extra_env = {}) {
    int out[2], in[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    // A test reads the child's output only when it looks for a line (or at the end). A child that
    // logs a line per event (a daemon installing versions) filled the default 64 KiB in about 600
    // lines and then stopped at its next log line; 1 MiB (the unprivileged maximum) holds about
    // 10,000. Best effort: a smaller pipe only brings that point closer.
    (void)fcntl(out[0], F_SETPIPE_SZ, 1 << 20);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    // extra_env replaces variables of the same name (getenv would otherwise see the first).
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string entry(*e);
      std::string name = entry.substr(0, entry.find('=') + 1);
      bool overridden = false;
      for (auto& x : extra_env) overridden = overridden || x.rfind(name, 0) == 0;
      if (!overridden) env.push_back(entry);
    }
    for (auto& e : extra_env) env.push_back(e);
    std::vector<char*> args, envp;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(in[0]);
    if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
    stdout_ = out[0];
    stdin_ = in[1];
  }
  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdout_);
    if (stdin_ >= 0) close(stdin_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The next line of output, or nullopt at end of output or after `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      ssize_t n = read(stdout_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  // Reads lines until one starts with `prefix`; returns it, or nullopt (the lines read are lost).
  std::optional<std::string> wait_for_line(const std::string& prefix,
                                           std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (auto line = read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
               deadline - std::chrono::steady_clock::now()))) {
      lines_.push_back(*line);
      if (line->rfind(prefix, 0) == 0) return line;
    }
    return std::nullopt;
  }

  // Writes one line to the child's stdin (for peers that take commands there).
  void send_line(const std::string& line) {
    std::string text = line + "\n";
    if (stdin_ < 0 || write(stdin_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      throw std::runtime_error("cannot write to the child's stdin");
    }
  }
  // Sends a command and returns the first line of its answer (starting with `prefix`).
  std::optional<std::string> ask(const std::string& command, const std::string& prefix,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    send_line(command);
    return wait_for_line(prefix, timeout);
  }

  void close_stdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }
  void kill_now() { kill(pid_, SIGKILL); }
  void terminate() { kill(pid_, SIGTERM); }  // a clean stop, as a service manager asks for one

  // Collects the rest of the output into lines(), then returns the exit status (or 128 + signal).
  int wait() {
    while (auto line = read_line(std::chrono::seconds(120))) lines_.push_back(*line);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  const std::vector<std::string>& lines() const { return lines_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  int stdin_ = -1;
  bool reaped_ = false;
  std::string buffer_;
  std::vector<std::string> lines_;
};

// Everything the child said so far, one line each: for failure messages.
inline std::string joined_lines(const ChildProcess& child) {
  std::string all;
  for (const auto& line : child.lines()) all += line + "\n";
  return all;
}

}  // namespace testing_support
