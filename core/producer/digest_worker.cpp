#include "core/producer/digest_worker.h"

#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <new>

#include "common/digest.h"

namespace modelcast::producer {

// Both hashes read each byte once from memory: the snapshot is walked in cache-sized pieces,
// each fed to its block's and its tensors' XXH3 states while it is still in cache. Hashing
// twice would double the digest thread's memory traffic, and a delta waits for these digests.
std::pair<std::vector<std::uint64_t>, std::vector<std::uint64_t>> tensor_and_block_digests(const std::byte* base,
                                                                                            const Manifest& layout) {
  constexpr std::uint64_t kPiece = 256u << 10;
  StreamingDigests tensors(layout.tensors);
  std::vector<std::uint64_t> blocks;
  const std::size_t count = block_count(layout);
  blocks.reserve(count);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t begin = i * layout.block_bytes;
    const std::uint64_t end = std::min(begin + layout.block_bytes, layout.total_bytes);
    XXH3_64bits_reset(state.get());
    for (std::uint64_t at = begin; at < end; at += kPiece) {
      const std::uint64_t piece = std::min(kPiece, end - at);
      XXH3_64bits_update(state.get(), base + at, piece);
      tensors.advance(base, at + piece);
    }
    blocks.push_back(XXH3_64bits_digest(state.get()));
  }
  tensors.advance(base, layout.total_bytes);
  return {tensors.digests(), std::move(blocks)};
}

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

DigestWorker::DigestWorker(Done done) : done_(std::move(done)), thread_([this] { run(); }) {}

DigestWorker::~DigestWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DigestWorker::submit(std::size_t slot, std::uint64_t version, const std::byte* base, const Manifest& layout) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({slot, version, base, &layout});
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
    const Manifest& layout = *job.layout;
    if (layout.block_bytes == 0) {
      std::vector<std::uint64_t> digests;
      digests.reserve(layout.tensors.size());
      for (const auto& t : layout.tensors) digests.push_back(digest_bytes(job.base + t.offset, t.size));
      done_(job.slot, job.version, std::move(digests), {});
      continue;
    }
    auto [digests, blocks] = tensor_and_block_digests(job.base, layout);
    done_(job.slot, job.version, std::move(digests), std::move(blocks));
  }
}

}  // namespace modelcast::producer
