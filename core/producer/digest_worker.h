// The producer's digest thread: hashes each new snapshot (XXH3 per block, the blocks being the
// transfer's chunks) on its own core, right behind publish()'s copy into the slot (CopyProgress),
// so integrity and delta updates cost the trainer nothing and the digests are ready about when
// the copy ends. The slot stays pinned (see SnapshotStore::publish) until the digests are
// handed back.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/model/manifest.h"
#include "core/producer/copy_progress.h"

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

  // Any thread. Each block of `base` is hashed once `copied` has passed its end; `done` for
  // this job never runs before the caller's copied.finish(),
  // so what the caller hands on before it (the version, to the service) arrives first. The
  // copied bytes must stay valid and unwritten until `done` has run; `layout` (tensors, block
  // size) must outlive the worker. A job whose copy never finishes keeps the worker from
  // finishing (publish() always finishes its copy).
  void submit(std::size_t slot, std::uint64_t version, const std::byte* base, const Manifest& layout,
              std::shared_ptr<const CopyProgress> copied);

 private:
  struct Job {
    std::size_t slot;
    std::uint64_t version;
    const std::byte* base;
    const Manifest* layout;
    std::shared_ptr<const CopyProgress> copied;
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
