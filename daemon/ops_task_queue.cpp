#include "daemon/ops_task_queue.h"

#include <sys/resource.h>

#include <algorithm>

namespace modelcastd {

namespace {

// The accept time of the job this worker runs (nullopt outside a job).
thread_local std::optional<OpsTaskQueue::Clock::time_point> running_job_accepted_at;

}  // namespace

OpsTaskQueue::OpsTaskQueue(std::size_t threads, std::size_t max_queued) : max_queued_(max_queued) {
  if (max_queued_ == 0) {
    rlimit limit{};
    const rlim_t open_files = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
    max_queued_ = static_cast<std::size_t>(std::clamp<rlim_t>(open_files / 8, 16, 4096));
  }
  workers_.reserve(threads);
  try {
    for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  } catch (...) {
    shutdown();  // the threads made so far, joined: a joinable std::thread destroyed ends the process
    throw;
  }
}

OpsTaskQueue::~OpsTaskQueue() { shutdown(); }

void OpsTaskQueue::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    if (jobs_.size() < max_queued_) {
      jobs_.push_back({std::move(job), Clock::now()});
      wake_.notify_one();
      return;
    }
  }
  // Run with no time left: it closes its connection without waiting for a request.
  running_job_accepted_at = Clock::time_point{};
  struct Reset {
    ~Reset() { running_job_accepted_at.reset(); }
  } reset;
  job();
}

void OpsTaskQueue::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

bool OpsTaskQueue::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

std::optional<OpsTaskQueue::Clock::time_point> OpsTaskQueue::accepted_at() { return running_job_accepted_at; }

void OpsTaskQueue::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    // Run, not dropped: the job owns its connection's socket, which it closes.
    running_job_accepted_at = stopping_ ? Clock::time_point{} : job.accepted_at;
    lock.unlock();
    job.run();
    running_job_accepted_at.reset();
    lock.lock();
  }
}

}  // namespace modelcastd
