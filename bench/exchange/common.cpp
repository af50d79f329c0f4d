#include "common.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

extern char** environ;

namespace bench {

std::int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::int64_t steady_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  return values[rank - 1];
}

// What starts this binary again for a child: itself, unless MODELCAST_BENCH_SELF names another
// way in. A copy run through a carried loader (scripts/gpu-bundle.sh) sets it to its wrapper,
// because there /proc/self/exe is the loader, not the benchmark.
std::string self_exe() {
  const char* override_self = std::getenv("MODELCAST_BENCH_SELF");
  if (override_self != nullptr && *override_self != '\0') return override_self;
  return std::filesystem::canonical("/proc/self/exe").string();
}

Child spawn_child(const std::vector<std::string>& args) {
  int down[2];  // parent -> child
  int up[2];    // child -> parent
  if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears FD_CLOEXEC on the new descriptors; the originals close on exec.
  posix_spawn_file_actions_adddup2(&actions, down[0], kParentReadFd);
  posix_spawn_file_actions_adddup2(&actions, up[1], kParentWriteFd);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, copy[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(down[0]);
  close(up[1]);
  if (rc != 0) {
    close(down[1]);
    close(up[0]);
    throw std::runtime_error("cannot start " + copy[0] + ": " + std::strerror(rc));
  }
  Child child;
  child.pid = pid;
  child.to_child = down[1];
  child.from_child = up[0];
  return child;
}

bool reap(Child& child) {
  if (child.to_child >= 0) close(child.to_child);
  child.to_child = -1;
  int status = 0;
  bool ok = false;
  if (child.pid > 0 && waitpid(child.pid, &status, 0) == child.pid) {
    ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  child.pid = -1;
  if (child.from_child >= 0) close(child.from_child);
  child.from_child = -1;
  return ok;
}

void write_line(int fd, const std::string& line) {
  std::string data = line + "\n";
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("write to pipe: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

namespace {
std::optional<std::string> take_line(std::string& pending) {
  auto nl = pending.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::string line = pending.substr(0, nl);
  pending.erase(0, nl + 1);
  return line;
}

// Reads what is there; false on EOF/error.
bool fill(int fd, std::string& pending) {
  char buffer[4096];
  ssize_t n;
  do {
    n = read(fd, buffer, sizeof buffer);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  pending.append(buffer, static_cast<std::size_t>(n));
  return true;
}
}  // namespace

std::optional<std::string> read_line(int fd, std::string& pending, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (auto line = take_line(pending)) return line;
    int wait = -1;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      wait = static_cast<int>(left.count());
    }
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, wait);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return std::nullopt;
    if (!fill(fd, pending)) return std::nullopt;
  }
}

std::optional<std::string> try_read_line(int fd, std::string& pending) {
  if (auto line = take_line(pending)) return line;
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return std::nullopt;
  if (!fill(fd, pending)) return std::nullopt;
  return take_line(pending);
}

}  // namespace bench
