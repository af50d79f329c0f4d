// The online scheduler's background refit: one worker thread, one job at a time. The caller
// (the scheduler, on the training thread) hands it a copy of the regime's points; the worker
// fits and hedges them with its own copy of the options and leaves the result in the mailbox,
// where the caller picks it up without waiting (take) or waiting (wait).
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "modelcast/predictor_online.h"

namespace modelcast::predictor {

class OnlineScheduler::RefitWorker {
 public:
  explicit RefitWorker(OnlineOptions options) : options_(std::move(options)), thread_([this] { run(); }) {}

  ~RefitWorker() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // a fit in progress runs to its end: the forecaster has no cancel
  }

  RefitWorker(const RefitWorker&) = delete;
  RefitWorker& operator=(const RefitWorker&) = delete;

  // Caller's thread. The previous job's result must have been taken.
  void submit(std::vector<CurvePoint> regime) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(regime);
      ready_ = false;
    }
    cv_.notify_all();
  }

  // Caller's thread: the result if the job is done (rethrowing what the fit threw), else nothing.
  std::optional<Fitted> take() {
    std::unique_lock lock(mutex_);
    if (!ready_) return std::nullopt;
    return collect(lock);
  }

  // Caller's thread: waits for the submitted job.
  Fitted wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return ready_; });
    return *collect(lock);
  }

 private:
  std::optional<Fitted> collect(std::unique_lock<std::mutex>& lock) {
    ready_ = false;
    auto error = std::exchange(error_, nullptr);
    auto result = std::exchange(result_, std::nullopt);
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
      std::vector<CurvePoint> regime = std::move(*job_);
      job_.reset();
      lock.unlock();
      std::optional<Fitted> result;
      std::exception_ptr error;
      try {
        result = OnlineScheduler::fit(regime, options_);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      result_ = std::move(result);
      error_ = error;
      ready_ = true;
      cv_.notify_all();
    }
  }

  const OnlineOptions options_;  // the worker's own copy, never written after construction
  std::mutex mutex_;
  std::condition_variable cv_;
  // Guarded by mutex_: the mailbox.
  std::optional<std::vector<CurvePoint>> job_;
  std::optional<Fitted> result_;
  std::exception_ptr error_;
  bool ready_ = false;  // the last job's result_ or error_ is there
  bool stop_ = false;
  std::thread thread_;  // last: it starts after every member it uses exists
};

}  // namespace modelcast::predictor
