// The producer's digest thread: hashes each new snapshot (XXH3 per tensor) while it is
// already being sent, so integrity costs the trainer nothing. The slot stays pinned (see
// SnapshotStore::publish) until the digests are handed back.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/model/manifest.h"

namespace modelcast::producer {

class DigestWorker {
 public:
  // Runs on the digest thread with each job's digests, in manifest order.
  using Done = std::function<void(std::size_t slot, std::uint64_t version, std::vector<std::uint64_t> digests)>;

  explicit DigestWorker(Done done);
  ~DigestWorker();  // finishes no further jobs; joins the thread
  DigestWorker(const DigestWorker&) = delete;
  DigestWorker& operator=(const DigestWorker&) = delete;

  // Any thread. `base` must stay valid and unwritten until `done` has run for this job.
  void submit(std::size_t slot, std::uint64_t version, const std::byte* base, const std::vector<TensorEntry>& tensors);

 private:
  struct Job {
    std::size_t slot;
    std::uint64_t version;
    const std::byte* base;
    const std::vector<TensorEntry>* tensors;
  };
  void run();

  Done done_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace modelcast::producer
