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
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

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

// std::thread(body), started with asynchronous signals blocked (see above).
template <typename Body>
std::thread library_thread(Body&& body) {
  AsyncSignalsBlocked blocked;
  return std::thread(std::forward<Body>(body));
}

}  // namespace modelcast
