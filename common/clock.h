// Wall-clock time as the wire carries it. Latencies between processes (publish() call until
// announced or installed elsewhere) compare CLOCK_REALTIME stamps: the only clock two processes,
// or two synchronised hosts, share. Durations inside one process use steady_clock instead.
#pragma once

#include <chrono>
#include <cstdint>

namespace modelcast {

inline std::int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace modelcast
