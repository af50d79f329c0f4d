// The online scheduler's background work: one thread, one job at a time, a mailbox between it
// and the caller. The scheduler owns two of them, one for refits and one for plans, so that a
// plan never queues behind a refit that takes tens of milliseconds. The caller (the scheduler,
// on the training thread) hands a job over by value; the worker runs `work` on it with nothing
// else shared and leaves the result in the mailbox, where the caller picks it up without waiting
// (take) or waiting (wait). Jobs must therefore carry copies, or pointers to immutable data.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/library_thread.h"

namespace modelcast::predictor::detail {

template <class Job, class Result>
class OnlineWorker {
 public:
  explicit OnlineWorker(std::function<Result(Job&)> work)
      : work_(std::move(work)), thread_(library_thread([this] { run(); })) {}

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

 private:
  std::optional<Result> collect(std::unique_lock<std::mutex>& lock) {
    ready_ = false;
    auto error = std::exchange(error_, nullptr);
    auto result = std::exchange(result_, std::nullopt);
    busy_s_ += job_s_;
    lock.unlock();
    if (error) std::rethrow_exception(error);
    return result;
  }

  // Worker thread.
  void run() {
    std::unique_lock lock(mutex_);
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

  const std::function<Result(Job&)> work_;  // called on the worker thread only
  std::mutex mutex_;
  std::condition_variable cv_;
  // Guarded by mutex_: the mailbox.
  std::optional<Job> job_;
  std::optional<Result> result_;
  std::exception_ptr error_;
  double job_s_ = 0.0;
  bool ready_ = false;  // the last job's result_ or error_ is there
  bool stop_ = false;
  double busy_s_ = 0.0;  // caller's thread only
  std::thread thread_;   // last: it starts after every member it uses exists
};

}  // namespace modelcast::predictor::detail
