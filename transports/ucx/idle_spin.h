// When the UCX progress thread stops polling and sleeps (ucp_worker_arm, ucp_worker_wait).
//
// Polling keeps a completion's latency in microseconds while data streams in; sleeping costs a
// wake-up per event. The budget is time since the last round that made progress, not a count
// of idle rounds: over TCP every idle round is a system call (UCX polls its sockets with
// epoll), so the 2,000 rounds the loop used to count lasted milliseconds, longer than the gap
// between segments on a link of tens of MB/s, and a receiving thread never slept. On 2 cores,
// nine processes polling so left the kernel too little time for their TCP traffic: eight
// relaying consumers took 1.7x one consumer's update instead of 1.14x (bench/RESULTS.md,
// fan-out; the exchange rows were no worse).
// Progress thread only.
#pragma once

#include <chrono>

namespace modelcast::transport {

class IdleSpin {
 public:
  using Clock = std::chrono::steady_clock;
  // budget 0: sleep as soon as a round makes no progress.
  explicit IdleSpin(std::chrono::microseconds budget) : budget_(budget) {}

  // A round made progress (or ran commands) at `now`.
  void progressed(Clock::time_point now) { last_progress_ = now; }
  // After a round without progress: poll again (true) or sleep until the worker's next event.
  bool keep_polling(Clock::time_point now) const { return now - last_progress_ < budget_; }

 private:
  std::chrono::microseconds budget_;
  Clock::time_point last_progress_{};
};

}  // namespace modelcast::transport
