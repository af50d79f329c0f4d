#include "daemon/hook_runner.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include <httplib.h>

extern char** environ;

namespace modelcastd {

std::string expand_placeholders(const std::string& text, const HookCall& call, bool encode) {
  auto value = [&](const std::string& v) {
    if (!encode) return v;
    std::string out;
    for (unsigned char c : v) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
        out += static_cast<char>(c);
      } else {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", c);
        out += hex;
      }
    }
    return out;
  };
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text.compare(i, 7, "{model}") == 0) {
      out += value(call.model);
      i += 7;
    } else if (text.compare(i, 9, "{version}") == 0) {
      out += std::to_string(call.version);
      i += 9;
    } else if (text.compare(i, 6, "{path}") == 0) {
      out += value(call.path);
      i += 6;
    } else {
      out += text[i++];
    }
  }
  return out;
}

HookRunner::HookRunner(Result on_result) : on_result_(std::move(on_result)) {
  thread_ = std::thread([this] { run(); });
}

HookRunner::~HookRunner() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HookRunner::submit(HookCall call) {
  {
    std::lock_guard lock(mutex_);
    auto model = call.model;
    pending_[model] = std::move(call);
  }
  wake_.notify_one();
}

void HookRunner::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    HookCall call = std::move(pending_.begin()->second);
    pending_.erase(pending_.begin());
    lock.unlock();
    std::string detail;
    bool ok = false;
    // An exception here would end the daemon (std::terminate on this thread): a hook that fails
    // in a way the config check did not foresee is a failed hook, reported like any other.
    try {
      ok = call.hook.http_post.empty() ? run_command(call, detail) : run_http(call, detail);
    } catch (const std::exception& e) {
      detail = std::string("hook failed: ") + e.what();
    }
    if (on_result_) on_result_(call, ok, detail);
    lock.lock();
  }
}

bool HookRunner::run_http(const HookCall& call, std::string& detail) {
  std::string url = expand_placeholders(call.hook.http_post, call, true);
  // http://HOST[:PORT]/PATH: httplib takes the scheme and authority, then the path per request.
  auto slash = url.find('/', 7);
  std::string origin = url.substr(0, slash);
  std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  httplib::Client client(origin);
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(call.hook.timeout).count();
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(call.hook.timeout).count() % 1'000'000;
  client.set_connection_timeout(seconds, micros);
  client.set_read_timeout(seconds, micros);
  client.set_write_timeout(seconds, micros);
  // An empty JSON object: what Triton's load request accepts without parameters.
  auto response = client.Post(path, "{}", "application/json");
  if (!response) {
    detail = "POST " + url + ": " + httplib::to_string(response.error());
    return false;
  }
  detail = "POST " + url + ": HTTP " + std::to_string(response->status);
  return response->status >= 200 && response->status < 300;
}

bool HookRunner::run_command(const HookCall& call, std::string& detail) {
  std::vector<std::string> args;
  for (const auto& a : call.hook.command) args.push_back(expand_placeholders(a, call, false));
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The daemon blocks SIGTERM/SIGHUP in its threads; the hook starts with nothing blocked.
  posix_spawnattr_setsigmask(&attr, &none);
  // Its own process group (pgid = its pid), so that a timeout kills what it started too: a
  // shell script's curl would otherwise outlive it, one per version.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  int rc = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    detail = "cannot run " + args[0] + ": " + std::strerror(rc);
    return false;
  }
  // A pidfd becomes readable when the process exits: a bounded wait without polling waitpid.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  bool exited = true;
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int ready;
    do {
      ready = poll(&p, 1, static_cast<int>(call.hook.timeout.count()));
    } while (ready < 0 && errno == EINTR);
    exited = ready > 0;
    close(pidfd);
  }
  if (!exited) kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!exited) {
    detail = args[0] + " timed out after " + std::to_string(call.hook.timeout.count()) + " ms and was killed";
    return false;
  }
  detail = args[0] + " exited with " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace modelcastd
