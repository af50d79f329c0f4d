#include "daemon/ops_task_queue.h"

namespace modelcastd {

namespace {

// The accept time of the job this worker runs (nullopt outside a job).
thread_local std::optional<OpsTaskQueue::Clock::time_point> running_job_accepted_at;

}  // namespace

OpsTaskQueue::OpsTaskQueue(std::size_t threads) {
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
    jobs_.push_back({std::move(job), Clock::now()});
  }
  wake_.notify_one();
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
