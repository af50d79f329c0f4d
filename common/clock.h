// Wall-clock time as the wire carries it. Latencies between processes (publish() call until
// announced or installed elsewhere) compare CLOCK_REALTIME stamps: the only clock two processes,
// or two synchronised hosts, share. Durations inside one process use steady_clock instead, and
// deadlines on it are made with deadline_after.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace modelcast {

inline std::int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The longest wait or option duration modelcast takes at its word: longer ones mean "for ever"
// in practice, and now() + milliseconds::max() would overflow steady_clock's nanoseconds (the
// standard library's wait_for then returns at once instead of waiting).
inline constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24 * 365 * 100);

// steady_clock::now() + timeout, the timeout clamped to [0, kLongestWait].
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto bounded = std::clamp(timeout, std::chrono::milliseconds(0), kLongestWait);
  return std::chrono::steady_clock::now() + bounded;
}

// The time since a CLOCK_REALTIME stamp a peer sent (a version's publish time), 0 for a stamp it
// did not set (0 or less): a broken or hostile peer's INT64_MIN overflowed the subtraction, and the
// wrapped value reached stats and the daemon's latency histogram. A positive stamp cannot overflow
// it (now is positive too); negative where the peer's clock is ahead of ours.
inline std::chrono::nanoseconds since_realtime(std::int64_t stamp_ns) {
  return std::chrono::nanoseconds(stamp_ns <= 0 ? 0 : realtime_ns() - stamp_ns);
}

}  // namespace modelcast
