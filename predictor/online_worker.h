// The online scheduler's background work: one thread, one job at a time, a mailbox between it
// and the caller. The scheduler owns two of them, one for refits and one for plans, so that a
// plan never queues behind a refit that takes tens of milliseconds. The caller (the scheduler,
// on the training thread) hands a job over by value; the worker runs `work` on it with nothing
// else shared and leaves the result in the mailbox, where the caller picks it up without waiting
// (take) or waiting (wait). Jobs must therefore carry copies, or pointers to immutable data.
//
// Batch scheduling (OnlineOptions::batch_scheduled_workers): the caller wakes the worker inside
// should_publish(), and a normally scheduled thread woken on a busy core preempts the thread that
// woke it, there and then, for up to a scheduler tick: the trainer's decision took 4 ms at the
// 99th percentile instead of 0.1 ms (bench/RESULTS.md, "Online scheduler's decision cost").
// Linux's SCHED_BATCH keeps the worker's full share of the CPU but never preempts on wake-up:
// it takes an idle core if there is one, else waits for the next tick. SCHED_IDLE was measured
// too and rejected: with every core busy the worker never ran and the scheduler never published.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <sched.h>
#include <thread>
#include <utility>

#include "common/library_thread.h"

namespace modelcast::predictor::detail {

template <class Job, class Result>
class OnlineWorker {
 public:
  // batch_scheduled: run under SCHED_BATCH (see above), else under the creating thread's policy.
  OnlineWorker(std::function<Result(Job&)> work, bool batch_scheduled)
      : work_(std::move(work)),
        batch_requested_(batch_scheduled),
        thread_(library_thread("predictor worker", [this] { run(); })) {}

  ~OnlineWorker() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // a job in progress runs to its end: fits and plans have no cancel
  }

  OnlineWorker(const OnlineWorker&) = delete;
  OnlineWorker& operator=(const OnlineWorker&) = delete;

  // Caller's thread. The previous job's result must have been taken.
  void submit(Job job) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
      ready_ = false;
    }
    cv_.notify_all();
  }

  // Caller's thread: the result if the job is done (rethrowing what the job threw), else nothing.
  std::optional<Result> take() {
    std::unique_lock lock(mutex_);
    if (!ready_) return std::nullopt;
    return collect(lock);
  }

  // Caller's thread: waits for the submitted job.
  Result wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return ready_; });
    return *collect(lock);
  }

  // Caller's thread: seconds the worker has spent running jobs whose results were collected.
  double busy_s() const { return busy_s_; }

  // Caller's thread: whether the worker runs under SCHED_BATCH, as of the last collected result
  // (false before one: the worker sets its policy when it starts).
  bool batch_scheduled() const { return batch_seen_; }

 private:
  std::optional<Result> collect(std::unique_lock<std::mutex>& lock) {
    ready_ = false;
    auto error = std::exchange(error_, nullptr);
    auto result = std::exchange(result_, std::nullopt);
    busy_s_ += job_s_;
    batch_seen_ = batch_scheduled_;
    lock.unlock();
    if (error) std::rethrow_exception(error);
    return result;
  }

  // Worker thread.
  void run() {
    if (batch_requested_) become_batch_scheduled();  // before any job runs
    const bool batch = runs_batch_scheduled();        // also when inherited from the creator
    std::unique_lock lock(mutex_);
    batch_scheduled_ = batch;
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || job_.has_value(); });
      if (stop_) return;
      Job job = std::move(*job_);
      job_.reset();
      lock.unlock();
      std::optional<Result> result;
      std::exception_ptr error;
      const auto start = std::chrono::steady_clock::now();
      try {
        result = work_(job);
      } catch (...) {
        error = std::current_exception();
      }
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      lock.lock();
      result_ = std::move(result);
      error_ = error;
      job_s_ = took;
      ready_ = true;
      cv_.notify_all();
    }
  }

  // Worker thread. Where the system refuses (or is not Linux) the worker runs as the thread that
  // created it, which OnlineStats::batch_scheduled_workers shows.
  static void become_batch_scheduled() {
#ifdef SCHED_BATCH
    sched_param param{};  // SCHED_BATCH takes static priority 0
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);  // the outcome is read back below
#endif
  }

  // Worker thread: the kernel's answer, not what was asked for.
  static bool runs_batch_scheduled() {
#ifdef SCHED_BATCH
    return sched_getscheduler(0) == SCHED_BATCH;
#else
    return false;
#endif
  }

  const std::function<Result(Job&)> work_;  // called on the worker thread only
  const bool batch_requested_;
  std::mutex mutex_;
  std::condition_variable cv_;
  // Guarded by mutex_: the mailbox.
  std::optional<Job> job_;
  std::optional<Result> result_;
  std::exception_ptr error_;
  double job_s_ = 0.0;
  bool ready_ = false;  // the last job's result_ or error_ is there
  bool stop_ = false;
  bool batch_scheduled_ = false;  // the worker's policy is SCHED_BATCH
  double busy_s_ = 0.0;       // caller's thread only
  bool batch_seen_ = false;   // caller's thread only
  std::thread thread_;   // last: it starts after every member it uses exists
};

}  // namespace modelcast::predictor::detail
