#include "daemon/child_reaper.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "modelcast/error.h"

namespace modelcastd {
namespace {

// Process-wide, as waiting for children is: the claimed pids, and the running reaper's wake
// descriptor (-1 when none runs).
struct Claims {
  std::mutex mutex;
  std::set<pid_t> pids;
  int wake_fd = -1;
};

Claims& claims() {
  static Claims instance;
  return instance;
}

void wake(int fd) {
  const std::uint64_t one = 1;
  // A full counter (2^64 - 2 wakes unread) already wakes the reader: nothing to do on failure.
  [[maybe_unused]] auto n = write(fd, &one, sizeof one);
}

}  // namespace

std::unique_ptr<ChildReaper> ChildReaper::start_if_needed() {
  int subreaper = 0;
  if (getpid() != 1 && (prctl(PR_GET_CHILD_SUBREAPER, &subreaper) != 0 || subreaper == 0)) return nullptr;
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  const int signal_fd = signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK);
  const int wake_fd = signal_fd < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const std::string why = std::strerror(errno);
    if (signal_fd >= 0) close(signal_fd);
    throw modelcast::Error(modelcast::ErrorCode::kResource, "cannot watch for ended child processes: " + why);
  }
  return std::unique_ptr<ChildReaper>(new ChildReaper(signal_fd, wake_fd));
}

ChildReaper::ChildReaper(int signal_fd, int wake_fd) : signal_fd_(signal_fd), wake_fd_(wake_fd) {
  {
    std::lock_guard lock(claims().mutex);
    claims().wake_fd = wake_fd_;
  }
  thread_ = std::thread([this] { run(); });
}

ChildReaper::~ChildReaper() {
  {
    std::lock_guard lock(claims().mutex);
    claims().wake_fd = -1;
  }
  stop_ = true;
  wake(wake_fd_);
  thread_.join();
  close(signal_fd_);
  close(wake_fd_);
}

std::uint64_t ChildReaper::reaped() const { return reaped_.load(); }

void ChildReaper::run() {
  // Orphans may have ended before the thread started: look once before waiting.
  for (;;) {
    reap_unclaimed();
    pollfd p[2] = {{signal_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) {
      spdlog::get("modelcastd")->error("no longer reaping ended child processes: poll: {}", std::strerror(errno));
      return;
    }
    // Drained, not counted: several SIGCHLDs may merge into one, so each wake reaps all there are.
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    }
    std::uint64_t count;
    [[maybe_unused]] auto n = read(wake_fd_, &count, sizeof count);
    if (stop_) return;
  }
}

void ChildReaper::reap_unclaimed() {
  std::lock_guard lock(claims().mutex);
  for (;;) {
    // Looked at without reaping (WNOWAIT) first: the child that has ended may be a claimed one,
    // whose status its holder takes. Then the others wait until that holder has taken it and
    // woken this thread: waitid shows one ended child at a time, the same until it is reaped.
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (claims().pids.count(info.si_pid) != 0) return;
    siginfo_t reaped{};
    if (waitid(P_PID, static_cast<id_t>(info.si_pid), &reaped, WEXITED | WNOHANG) != 0) return;
    reaped_++;
    spdlog::get("modelcastd")->debug("reaped process {} (a child a hook left behind)", info.si_pid);
  }
}

ClaimedChild::ClaimedChild(const std::function<pid_t()>& spawn) {
  std::lock_guard lock(claims().mutex);
  pid_ = spawn();
  if (pid_ > 0) claims().pids.insert(pid_);
}

ClaimedChild::~ClaimedChild() {
  if (pid_ <= 0) return;
  std::lock_guard lock(claims().mutex);
  claims().pids.erase(pid_);
  if (claims().wake_fd >= 0) wake(claims().wake_fd);
}

}  // namespace modelcastd
