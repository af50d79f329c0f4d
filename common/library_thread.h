// How the library starts a thread of its own: with every asynchronous signal blocked, so that the
// application's signal handlers run on the application's threads, never on ours.
//
// Why: a handler that ran on a service thread interrupted its poll(2), which then fails with
// EINTR (poll is never restarted, SA_RESTART or not); cppzmq throws that as zmq::error_t, and the
// process ended (std::terminate) on the first SIGCHLD a trainer's data loader or a SIGTERM a
// server's handler takes. POSIX gives a process-directed signal to a thread that does not block
// it, so blocking here loses the application none; one directed at a library thread stays pending.
// libzmq's own threads do the same. Synchronous signals (a fault) stay unblocked: blocking them
// would not stop them, and a crash must still reach its handler.
//
// Threads: library_thread() may be called from any thread; it changes the caller's signal mask
// only while the new thread is created (the new thread inherits it), and restores it.
//
// Errors: a thread that cannot be started (the user's process and thread limit, `ulimit -u`, or
// no memory for its stack) is Error(kResource) naming the thread: std::thread's std::system_error
// names neither, and is not the library's error type.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "modelcast/error.h"

namespace modelcast {

class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked() {
    sigset_t set;
    sigfillset(&set);
    for (int sync : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&set, sync);
    pthread_sigmask(SIG_BLOCK, &set, &saved_);
  }
  ~AsyncSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

inline Error thread_not_started(const std::string& what, const std::system_error& e) {
  return Error(ErrorCode::kResource, "cannot start the " + what + " thread: " + e.what() +
                                         " (the limit of processes and threads, `ulimit -u`, reached, or no memory "
                                         "for its stack)");
}

// std::thread(body), started with asynchronous signals blocked (see above); `what` names the
// thread in the error if it cannot start.
template <typename Body>
std::thread library_thread(const std::string& what, Body&& body) {
  AsyncSignalsBlocked blocked;
  try {
    return std::thread(std::forward<Body>(body));
  } catch (const std::system_error& e) {
    throw thread_not_started(what, e);
  }
}

// Throws Error(kResource) naming `what` unless `count` more threads can run at once now; starts
// and joins them. For libraries that start threads of their own and abort when they cannot
// (libzmq asserts on a failed pthread_create): asked first, the caller gets an error instead.
// A probe, not a reservation: a thread started elsewhere in between can still take the room.
inline void check_threads_can_start(std::size_t count, const std::string& what) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::thread> probes;
  std::vector<pid_t> ids(count, 0);  // each written by its probe before it exits, read after the join
  probes.reserve(count);
  auto join_all = [&] {
    release.set_value();
    for (auto& t : probes) t.join();
    // A joined thread still counts against the limit until the kernel releases it: Linux clears
    // the thread's id (which ends the join) as it drops its memory, and releases the task, whose
    // /proc entry then goes, later in its exit. Waited for (bounded), so that the starts the
    // probe said would fit do not fail against its own leftovers (not seen here; the order is
    // the kernel's).
    for (std::size_t i = 0; i < probes.size(); ++i) {
      const std::string entry = "/proc/self/task/" + std::to_string(ids[i]);
      for (int spins = 0; spins < 100000 && access(entry.c_str(), F_OK) == 0; ++spins) sched_yield();
    }
  };
  try {
    for (std::size_t i = 0; i < count; ++i) {
      probes.push_back(library_thread(what, [released, id = &ids[i]] {
        *id = static_cast<pid_t>(syscall(SYS_gettid));
        released.wait();
      }));
    }
  } catch (...) {
    join_all();
    throw;
  }
  join_all();
}

}  // namespace modelcast
