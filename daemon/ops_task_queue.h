// The ops endpoint's pooled threads: httplib's TaskQueue, with each connection's job keeping the
// time its connection was accepted, from which the connection's request deadline counts
// (ConnectionLimits::request_time). cpp-httplib's own ThreadPool cannot carry that: its jobs are
// opaque closures, and a connection's second then began when a thread took it. Behind a flood
// of idle connections the queue grew by every one, until the process had no descriptor left
// (repository writes failed), and a stop served each queued connection its full second (a
// minute and more, past systemd's stop timeout). Now a connection that waited its second in the
// queue is closed at once (a probe too: it would have timed out by then), so what queues is
// bounded by the arrivals of about a second beyond what the threads serve, and once a stop
// begins the queued ones get no time at all. A second of arrivals is still unbounded (4,000
// connections a second took every descriptor of a daemon limited to 1,024, and repository
// writes failed): past max_queued waiting, a connection is closed at once, on the accept thread.
//
// Threads: enqueue() from httplib's accept thread, shutdown() from the one stopping the server;
// each worker runs jobs, and accepted_at() answers the worker that calls it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <httplib.h>

namespace modelcastd {

class OpsTaskQueue final : public httplib::TaskQueue {
 public:
  using Clock = std::chrono::steady_clock;
  // max_queued: connections waiting for a thread, at most (0: an eighth of the open-file limit,
  // at least 16 and at most 4096); past that, each is given no time (closed) as it arrives.
  explicit OpsTaskQueue(std::size_t threads, std::size_t max_queued = 0);
  ~OpsTaskQueue() override;  // shuts down if shutdown() was not called
  OpsTaskQueue(const OpsTaskQueue&) = delete;
  OpsTaskQueue& operator=(const OpsTaskQueue&) = delete;

  void enqueue(std::function<void()> job) override;
  // Runs the jobs still queued, each with no time left, and joins the workers.
  void shutdown() override;
  bool stopping() const;  // shutdown() has begun

  // Inside a job of this queue: when its connection was accepted (once a stop began, a time
  // long past). Elsewhere: nullopt.
  static std::optional<Clock::time_point> accepted_at();

 private:
  struct Job {
    std::function<void()> run;
    Clock::time_point accepted_at;
  };
  void work();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;   // mutex_
  std::size_t max_queued_ = 0;
  bool stopping_ = false;  // mutex_
  std::vector<std::thread> workers_;
};

}  // namespace modelcastd
