// How far publish()'s copy into a snapshot slot has got, for the digest thread that hashes the
// slot behind it. Hashing a block as soon as the copy has passed it, on another core, makes the
// digests (which integrity checks and every delta wait for) ready about when the copy ends
// instead of one whole pass over the snapshot later.
//
// Threads: the trainer's thread (inside publish()) is the only writer; the digest thread waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>

namespace modelcast::producer {

class CopyProgress {
 public:
  // Greater than any offset: what finish() publishes.
  static constexpr std::uint64_t kFinished = std::numeric_limits<std::uint64_t>::max();

  // Bytes [0, bytes) of the slot are copied. Calls never decrease `bytes`.
  void advance(std::uint64_t bytes) noexcept {
    copied_.store(bytes, std::memory_order_release);
    copied_.notify_all();
  }
  // The whole slot is copied and the version handed to the service (see DigestWorker).
  void finish() noexcept { advance(kFinished); }
  // Blocks until advance() or finish() has reached `bytes`.
  void wait_for(std::uint64_t bytes) const noexcept {
    for (auto copied = copied_.load(std::memory_order_acquire); copied < bytes;
         copied = copied_.load(std::memory_order_acquire)) {
      copied_.wait(copied, std::memory_order_acquire);
    }
  }

 private:
  std::atomic<std::uint64_t> copied_{0};
};

}  // namespace modelcast::producer
