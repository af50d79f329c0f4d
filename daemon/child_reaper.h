// Who waits for the daemon's child processes. The hook runner waits for the commands it starts.
// What those leave behind (a hook's `server &`, the children of a hook killed for its timeout) is
// given, once its parent has ended, to the nearest child subreaper or the namespace's init: where
// modelcastd is that process (PID 1, a container's entry point), nothing waited for them and each
// stayed a zombie, one or two a hook, until the pid cgroup limit stopped every fork. ChildReaper
// waits for them there.
//
// Threads: ChildReaper has a thread of its own, woken by SIGCHLD (a signalfd) and by each
// ClaimedChild that ends. Any thread may hold a ClaimedChild; the reaper leaves claimed pids to
// their holders, and never takes a status a holder is owed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

namespace modelcastd {

class ChildReaper {
 public:
  // Reaps for this process if it is given orphans (it is PID 1, or a child subreaper), else
  // returns null. SIGCHLD must be blocked in every thread first (main() blocks it before any is
  // made): the reaper takes it from a signalfd. Throws modelcast::Error when it cannot start.
  static std::unique_ptr<ChildReaper> start_if_needed();
  ~ChildReaper();  // stops the thread; orphans that end later stay zombies until the process ends
  ChildReaper(const ChildReaper&) = delete;
  ChildReaper& operator=(const ChildReaper&) = delete;

  // Orphans reaped so far; thread-safe.
  std::uint64_t reaped() const;

 private:
  ChildReaper(int signal_fd, int wake_fd);
  void run();
  void reap_unclaimed();

  const int signal_fd_;  // SIGCHLD
  const int wake_fd_;    // an eventfd: a claim ended, or the destructor stops the thread
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> reaped_{0};
  std::thread thread_;
};

// A command that its starter waits for itself (waitpid on its pid): the reaper leaves it alone.
// The claim is made with the spawn, under the lock the reaper reaps under, so that a command that
// ends at once is not reaped first (its starter would find no status); hold it until the
// command's status has been taken.
class ClaimedChild {
 public:
  // Runs `spawn` (returns the new pid, or a negative value when nothing started) and claims its
  // pid. `spawn` runs under the reaper's lock: it must only start the process.
  explicit ClaimedChild(const std::function<pid_t()>& spawn);
  ~ClaimedChild();  // ends the claim and lets the reaper look again
  ClaimedChild(const ClaimedChild&) = delete;
  ClaimedChild& operator=(const ClaimedChild&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace modelcastd
