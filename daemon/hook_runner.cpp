#include "daemon/hook_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <exception>
#include <filesystem>
#include <system_error>

#include <httplib.h>

#include "daemon/child_reaper.h"
#include "modelcast/error.h"

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

namespace {

// httplib names its errors in one word ("Connection", "Read"); the operator reading the log wants
// to know what happened and which setting bounds it. The word is kept, for searches.
std::string describe(httplib::Error error, std::chrono::milliseconds timeout) {
  const std::string within = " within timeout_ms (" + std::to_string(timeout.count()) + " ms)";
  std::string what;
  switch (error) {
    case httplib::Error::Connection:
      what = "could not connect (nothing listening, unreachable, or not accepted" + within + ")";
      break;
    case httplib::Error::ConnectionTimeout:
      what = "could not connect" + within;
      break;
    case httplib::Error::Read:
      what = "no complete answer" + within + ", or the server closed the connection first";
      break;
    case httplib::Error::Write:
      what = "the request could not be sent" + within + " (the server closed the connection or did not read)";
      break;
    default:
      what = "failed";
      break;
  }
  return what + " [httplib: " + httplib::to_string(error) + "]";
}

// The same, for a POST the deadline cut short: which stage it was in, by httplib's word for how
// the shut socket failed it.
std::string describe_cut(httplib::Error error, std::chrono::milliseconds timeout) {
  const std::string within = " within timeout_ms (" + std::to_string(timeout.count()) + " ms)";
  std::string what;
  switch (error) {
    case httplib::Error::Connection:
    case httplib::Error::ConnectionTimeout:
      what = "could not connect" + within;
      break;
    case httplib::Error::Write:
      what = "the request could not be sent" + within;
      break;
    default:
      what = "no complete answer" + within;
      break;
  }
  return what + "; cut short [httplib: " + httplib::to_string(error) + "]";
}

}  // namespace

HookRunner::HookRunner(Result on_result)
    : on_result_(std::move(on_result)), stop_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (stop_fd_ < 0) {
    throw modelcast::Error(modelcast::ErrorCode::kResource, std::string("hooks: eventfd: ") + std::strerror(errno));
  }
}

HookRunner::~HookRunner() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    for (auto& [model, lane] : lanes_) {
      shut(*lane);  // ends its POST now, connecting or not
      if (lane->http_watchdog) lane->http_watchdog->notify_all();  // and one whose socket is not made yet
      lane->wake.notify_all();
    }
  }
  // Never read: the counter stays non-zero, so every lane's wait for its command sees it.
  const std::uint64_t one = 1;
  [[maybe_unused]] auto written = write(stop_fd_, &one, sizeof one);
  // No lane is added once stop_ is set, and only the destructor removes them.
  for (auto& [model, lane] : lanes_) lane->thread.join();
  close(stop_fd_);
}

void HookRunner::submit(HookCall call) {
  std::unique_lock lock(mutex_);
  if (stop_) return;
  auto& lane = lanes_[call.model];
  if (!lane) {
    auto fresh = std::make_unique<Lane>();
    try {
      fresh->thread = std::thread([this, l = fresh.get()] { run(*l); });
    } catch (const std::system_error& e) {
      lanes_.erase(call.model);
      lock.unlock();
      if (on_result_) on_result_(call, false, std::string("cannot start a thread for the model's hooks: ") + e.what());
      return;
    }
    lane = std::move(fresh);
  }
  lane->pending = std::move(call);
  lane->wake.notify_one();
}

void HookRunner::run(Lane& lane) {
  std::unique_lock lock(mutex_);
  for (;;) {
    lane.wake.wait(lock, [&] { return stop_ || lane.pending; });
    if (stop_) return;
    HookCall call = std::move(*lane.pending);
    lane.pending.reset();
    lane.running_path = call.path;
    lock.unlock();
    std::string detail;
    bool ok = false;
    // An exception here would end the daemon (std::terminate on this thread): a hook that fails
    // in a way the config check did not foresee is a failed hook, reported like any other.
    try {
      ok = call.hook.http_post.empty() ? run_command(call, detail) : run_http(lane, call, detail);
    } catch (const std::exception& e) {
      detail = std::string("hook failed: ") + e.what();
    }
    {
      // Before the result is told: whoever hears of the hook's end may find its path let go.
      std::lock_guard cleared(mutex_);
      lane.running_path.clear();
    }
    if (on_result_) on_result_(call, ok, detail);
    lock.lock();
  }
}

bool HookRunner::uses(const std::string& directory) const {
  if (directory.empty()) return false;
  // Compared as paths: the writer lists what it wrote by another route than it named it then.
  const auto wanted = std::filesystem::path(directory).lexically_normal();
  auto same = [&](const std::string& path) {
    return !path.empty() && std::filesystem::path(path).lexically_normal() == wanted;
  };
  std::lock_guard lock(mutex_);
  for (const auto& [model, lane] : lanes_) {
    if (same(lane->running_path) || (lane->pending && same(lane->pending->path))) return true;
  }
  return false;
}

void HookRunner::shut(Lane& lane) {
  if (lane.http_socket >= 0) ::shutdown(lane.http_socket, SHUT_RDWR);
}

bool HookRunner::run_http(Lane& lane, const HookCall& call, std::string& detail) {
  std::string url = expand_placeholders(call.hook.http_post, call, true);
  // http://HOST[:PORT]/PATH: httplib takes the scheme and authority, then the path per request.
  auto slash = url.find('/', 7);
  std::string origin = url.substr(0, slash);
  std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  httplib::Client client(origin);
  {
    std::lock_guard lock(mutex_);
    if (stop_) {
      detail = "POST " + url + ": not sent, the daemon is stopping";
      return false;
    }
    lane.http_cut = false;
  }
  // Called on this thread with each socket httplib makes, before it connects. A socket made
  // after the stop or the deadline is shut as soon as its connect begins: see the watchdog.
  // Without a duplicate (no descriptor left) the POST runs under httplib's timeouts alone.
  client.set_socket_options([this, &lane](socket_t socket) {
    const int mine = fcntl(socket, F_DUPFD_CLOEXEC, 0);
    std::lock_guard lock(mutex_);
    if (lane.http_socket >= 0) close(lane.http_socket);
    lane.http_socket = mine;
  });
  // One deadline for the whole POST (connect, send, answer), which httplib's per-read timeouts
  // are not: a server sending a byte every half second kept a 1 s hook going for as long as it
  // liked. The watchdog also ends the POST when the daemon stops.
  const auto deadline = std::chrono::steady_clock::now() + call.hook.timeout;
  bool finished = false;
  std::condition_variable finished_changed;
  // Made and published in one step: a thread that cannot be made leaves nothing published (the
  // destructor would have woken a condition variable gone with this frame), and the destructor
  // cannot come between the two (a watchdog it never woke waited for the deadline).
  std::thread watchdog;
  std::unique_lock publish(mutex_);
  watchdog = std::thread([&] {
    std::unique_lock lock(mutex_);
    while (!finished) {
      const bool late = std::chrono::steady_clock::now() >= deadline;
      if (late || stop_) {
        lane.http_cut = lane.http_cut || late;
        shut(lane);  // again on each wake-up: a socket made after the first shutdown gets it too
        finished_changed.wait_for(lock, std::chrono::milliseconds(20));
      } else {
        finished_changed.wait_until(lock, deadline);
      }
    }
  });
  lane.http_watchdog = &finished_changed;
  publish.unlock();
  struct Unregister {
    HookRunner& runner;
    Lane& lane;
    bool& finished;
    std::condition_variable& finished_changed;
    std::thread& watchdog;
    ~Unregister() {
      {
        std::lock_guard lock(runner.mutex_);
        finished = true;
        if (lane.http_socket >= 0) close(lane.http_socket);
        lane.http_socket = -1;
        lane.http_watchdog = nullptr;
      }
      finished_changed.notify_all();
      watchdog.join();
    }
  } unregister{*this, lane, finished, finished_changed, watchdog};
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(call.hook.timeout).count();
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(call.hook.timeout).count() % 1'000'000;
  client.set_connection_timeout(seconds, micros);
  client.set_read_timeout(seconds, micros);
  client.set_write_timeout(seconds, micros);
  // An empty JSON object: what Triton's load request accepts without parameters. The answer's
  // body is read and dropped: only its status counts, and Post() kept all of it in memory (a
  // server streaming an endless body grew the daemon by gigabytes until the deadline).
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.set_header("Content-Type", "application/json");
  request.body = "{}";
  request.content_receiver = [](const char*, std::size_t, std::uint64_t, std::uint64_t) { return true; };
  auto response = client.send(request);
  if (!response) {
    std::lock_guard lock(mutex_);
    detail = "POST " + url + ": " +
             (stop_            ? std::string("cut short, the daemon is stopping")
              : lane.http_cut ? describe_cut(response.error(), call.hook.timeout)
                               : describe(response.error(), call.hook.timeout));
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
  // systemd starts services with SIGPIPE ignored (IgnoreSIGPIPE=yes by default), and ignored
  // signals survive exec: a hook's `a | head` saw EPIPE errors where a shell user expects `a`
  // to end quietly.
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  // Only stdin, stdout and stderr: UCX's sockets, pipes and epoll descriptors are opened without
  // close-on-exec, and a hook (or what it leaves running) held them.
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addclosefrom_np(&files, 3);
  int rc = 0;
  // Claimed for this thread's waitpid: where the daemon reaps orphans (PID 1), its reaper would
  // otherwise take the command's status.
  const ClaimedChild claim([&] {
    rc = posix_spawnp(&pid, argv[0], &files, &attr, argv.data(), environ);
    return rc == 0 ? pid : -1;
  });
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    detail = "cannot run " + args[0] + ": " + std::strerror(rc);
    return false;
  }
  // A pidfd becomes readable when the process exits: a bounded wait without polling waitpid.
  // Without one (no descriptor left) the exit is checked between short waits on the stop
  // descriptor: a plain waitpid had no timeout, and held the daemon's stop until the hook ended.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  int status = 0;
  bool reaped = false;  // waitpid has taken the command's status (fallback only)
  // Waits up to `limit` for the command's end, or (`watch_stop`) the daemon's stop (stop_fd_):
  // 1 it exited, 2 the daemon stops, 0 the limit passed.
  auto wait_for_exit = [&](std::chrono::milliseconds limit, bool watch_stop) {
    constexpr std::chrono::milliseconds kCheckEvery{20};  // without a pidfd only
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (pidfd < 0 && waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
        return 1;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 && pidfd < 0) return 0;
      pollfd p[2] = {{pidfd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      pollfd* watched = pidfd >= 0 ? p : p + 1;
      const int count = (pidfd >= 0 ? 1 : 0) + (watch_stop ? 1 : 0);
      const auto wait = pidfd >= 0 ? left : std::min(left, kCheckEvery);
      int ready = poll(watched, count, static_cast<int>(std::max<std::int64_t>(wait.count(), 0)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready > 0 && pidfd >= 0 && (p[0].revents & POLLIN)) return 1;  // exited
      if (ready > 0) return 2;                                             // the daemon stops
      if (pidfd >= 0) return 0;                                            // timed out
    }
  };
  bool stopped = false;  // the daemon stops: the command was ended before its timeout
  int how = wait_for_exit(call.hook.timeout, true);
  if (how == 2) {
    stopped = true;
    kill(-pid, SIGTERM);
    how = wait_for_exit(kStopGrace, false);
  }
  const bool exited = how == 1;
  if (pidfd >= 0) close(pidfd);
  // Before waitpid: until the leader is reaped its pid, the group's id, cannot be reused. A
  // daemon that stops leaves nothing the hook started running (but where the fallback reaped the
  // leader already, the group is not signalled: its id may be another's by now).
  if ((!exited || stopped) && !reaped) kill(-pid, SIGKILL);
  bool status_lost = false;  // taken by another waiter: never counted as a success
  if (!reaped) {
    pid_t waited;
    do {
      waited = waitpid(pid, &status, 0);
    } while (waited < 0 && errno == EINTR);
    status_lost = waited != pid;
  }
  if (stopped) {
    detail = args[0] + (exited ? " was ended with SIGTERM" : " was killed") + ": the daemon is stopping";
    return false;
  }
  if (!exited) {
    detail = args[0] + " timed out after " + std::to_string(call.hook.timeout.count()) + " ms and was killed";
    return false;
  }
  if (status_lost) {
    detail = args[0] + " ended, and its exit status was lost (" + std::strerror(errno) + ")";
    return false;
  }
  detail = args[0] + " exited with " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace modelcastd
