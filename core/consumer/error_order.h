// Which of several last errors came last. A consumer of a sharded model keeps one last error
// per rank service and one for its assembler; stats() reports the newest of them, so an old
// refusal (a layout mistake since fixed) never hides a newer failure (a rank gone).
#pragma once

#include <atomic>
#include <cstdint>

namespace modelcast::consumer {

// A number greater than every one returned before, in this process; any thread.
inline std::uint64_t next_error_order() {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace modelcast::consumer
