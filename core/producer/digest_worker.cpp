#include "core/producer/digest_worker.h"

#include <algorithm>

#include "common/digest.h"
#include "common/library_thread.h"

namespace modelcast::producer {

std::vector<std::uint64_t> block_digests(const std::byte* base, const Manifest& layout) {
  std::vector<std::uint64_t> digests;
  const std::size_t blocks = block_count(layout);
  digests.reserve(blocks);
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::uint64_t offset = i * layout.block_bytes;
    digests.push_back(digest_bytes(base + offset, std::min(layout.block_bytes, layout.total_bytes - offset)));
  }
  return digests;
}

DigestWorker::DigestWorker(Done done)
    : done_(std::move(done)), thread_(library_thread("digest", [this] { run(); })) {}

DigestWorker::~DigestWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DigestWorker::submit(std::size_t slot, std::uint64_t version, const std::byte* base, const Manifest& layout) {
  // Blocks are what consumers check (and what a delta compares): one XXH3 pass. Hashing each
  // tensor too would double the digest thread's work, which is on the path of every delta.
  help([this, slot, version, base, &layout] { done_(slot, version, block_digests(base, layout)); });
}

void DigestWorker::help(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void DigestWorker::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace modelcast::producer
