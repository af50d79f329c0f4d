// A host buffer made ahead of need, for the consumer's receive buffers and shaped views.
#pragma once

#include <cstddef>
#include <future>
#include <optional>

#include "common/host_buffer.h"

namespace modelcast {

// Mapping and touching huge pages took 0.3-1.1 s per 256 MiB on a loaded host; a buffer made
// ahead spares that to the version that needs it. Threads: the owner's thread calls everything;
// a helper thread of its own (std::async) only maps and touches the memory. Destruction waits
// for a buffer still being made.
class HostBufferAhead {
 public:
  // Whether one is being made (or made) with at least `bytes`.
  bool covers(std::size_t bytes) const { return future_.valid() && bytes_ >= bytes; }
  // Starts making one of `bytes`, in place of any other; with no thread to spare, none.
  void start(std::size_t bytes);
  // The one made, waited for, when it holds between `bytes` and twice that (a much larger one
  // is dropped: memory is what is scarce); nullopt when none fits or it could not be mapped
  // (the caller then allocates, and reports what still fails). None is under way afterwards.
  std::optional<HostBuffer> take(std::size_t bytes);
  void drop() { future_ = {}; }

 private:
  std::future<HostBuffer> future_;
  std::size_t bytes_ = 0;
};

}  // namespace modelcast
