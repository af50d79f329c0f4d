// One UCP context and worker with the thread that progresses them.
//
// Threads: the progress thread alone calls into the worker. Any thread hands it work with post()
// (woken through ucp_worker_signal, the one UCP call documented as safe from any thread) or
// run() (post and wait for the result). The context and worker are created before the thread
// starts and destroyed after it has stopped. A child made by fork() has the object but not its
// thread, and UCX does not work there: in_forked_child() says so, and nothing waits for the thread.
#pragma once

#include <sys/types.h>

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <optional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transports/ucx/idle_spin.h"
#include "transports/ucx/ucx_quirks.h"

namespace modelcast::transport {

[[noreturn]] void throw_ucx(const std::string& what, ucs_status_t status);

class UcxWorker {
 public:
  // Hooks run on the progress thread: `after_progress` after every progress round (reap
  // finished requests), `at_shutdown` once when stop() is called, before the thread exits, with
  // the worker still progressing (cancel and close what is left; it must not block on peers).
  // `wake_by`, when set, says when the thread must look again although nothing happened (a
  // deadline of the owner's); its sleep ends then at the latest.
  struct Hooks {
    std::function<void()> after_progress;
    std::function<void()> at_shutdown;
    std::function<std::optional<std::chrono::steady_clock::time_point>()> wake_by;
  };

  // Throws Error(kTransport) naming the UCP call that failed.
  // `indirect_ids`: UcxOptions::indirect_endpoint_ids.
  UcxWorker(std::uint64_t features, bool indirect_ids, const UcxQuirks& quirks);
  ~UcxWorker();  // destroy()
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // Starts the progress thread; once, after the owner is ready for hooks to run. It polls for
  // `idle_spin` after the last progress before it sleeps (IdleSpin).
  void start(Hooks hooks, std::chrono::microseconds idle_spin);
  // Runs at_shutdown on the progress thread and joins it. Idempotent.
  void stop();
  // stop(), then destroys the worker and the context. A halted worker is leaked instead where
  // UcxQuirks::destroying_busy_worker_asserts: it may still track a matched rendezvous receive.
  void destroy();
  // Progress thread: never call ucp_worker_progress again (commands still run), so nothing
  // arrives or completes any more. For receives that cannot be stopped before their memory goes.
  void halt() { halted_ = true; }
  bool halted() const { return halted_; }

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  // (Never in a forked child, where a thread of the child's may have the parent thread's id.)
  bool on_progress_thread() const {
    return std::this_thread::get_id() == thread_.get_id() && !in_forked_child();
  }
  // Whether this is a child the worker's process forked: the progress thread stayed in the parent.
  // What must end here (a region a view still held) is left as it is, as the whole worker is.
  bool in_forked_child() const;

  // Dropped in a forked child (no thread would run it).
  void post(std::function<void()> command);

  // Runs `f` on the progress thread and waits for its result (or exception). Throws Error(kState)
  // in a forked child.
  template <typename F>
  auto run(F&& f) -> decltype(f()) {
    refuse_in_forked_child();
    if (on_progress_thread()) return f();
    using R = decltype(f());
    std::packaged_task<R()> task(std::forward<F>(f));
    auto result = task.get_future();
    post([&task] { task(); });
    return result.get();
  }

 private:
  void progress_loop(IdleSpin spin);
  void refuse_in_forked_child() const;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  Hooks hooks_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> halted_{false};
  const bool leak_when_halted_;
  const pid_t owner_pid_;           // the process that made it (and its thread)
  const unsigned owner_forks_;      // the forks that made that process (counted in the .cpp)
  std::mutex commands_mutex_;
  std::condition_variable commands_ready_;  // wakes a halted progress thread
  std::vector<std::function<void()>> commands_;  // guarded by commands_mutex_
  std::thread thread_;
};

}  // namespace modelcast::transport
