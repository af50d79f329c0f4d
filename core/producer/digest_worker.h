// The producer's digest thread: hashes each new snapshot (XXH3 per block, the blocks being the
// transfer's chunks) while it is already being sent, so integrity and delta updates cost the
// trainer nothing. The slot stays pinned (see SnapshotStore::publish) until the digests are
// handed back. When publish() hashes a snapshot itself (changed_blocks_copy.h), the thread,
// idle then, takes a share of the blocks (help).
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

// XXH3-64 of each of the layout's blocks of the snapshot at `base` (none without blocks).
std::vector<std::uint64_t> block_digests(const std::byte* base, const Manifest& layout);

class DigestWorker {
 public:
  // Runs on the digest thread with each job's block digests. Host layouts with integrity always
  // have blocks (device versions are hashed on the device instead).
  using Done = std::function<void(std::size_t slot, std::uint64_t version, std::vector<std::uint64_t> block_digests)>;

  explicit DigestWorker(Done done);
  ~DigestWorker();  // finishes no further jobs; joins the thread
  DigestWorker(const DigestWorker&) = delete;
  DigestWorker& operator=(const DigestWorker&) = delete;

  // Any thread. `base` must stay valid and unwritten until `done` has run for this job;
  // `layout` (tensors, block size) must outlive the worker.
  void submit(std::size_t slot, std::uint64_t version, const std::byte* base, const Manifest& layout);
  // Any thread. Runs `task` on the digest thread after the jobs submitted before it (never, if
  // the worker is destroyed first).
  void help(std::function<void()> task);

 private:
  void run();

  Done done_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace modelcast::producer
