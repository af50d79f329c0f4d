#include "core/producer/digest_worker.h"

#include "common/digest.h"

namespace modelcast::producer {

DigestWorker::DigestWorker(Done done) : done_(std::move(done)), thread_([this] { run(); }) {}

DigestWorker::~DigestWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DigestWorker::submit(std::size_t slot, std::uint64_t version, const std::byte* base,
                          const std::vector<TensorEntry>& tensors) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({slot, version, base, &tensors});
  }
  cv_.notify_one();
}

void DigestWorker::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    std::vector<std::uint64_t> digests;
    digests.reserve(job.tensors->size());
    for (const auto& t : *job.tensors) digests.push_back(digest_bytes(job.base + t.offset, t.size));
    done_(job.slot, job.version, std::move(digests));
  }
}

}  // namespace modelcast::producer
