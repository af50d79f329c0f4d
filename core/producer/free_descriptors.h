// How many more file descriptors this process may open, and the thresholds at which the
// producer's service thread stops and starts accepting control connections.
//
// Why the producer watches this at all: ZeroMQ accepts control connections on its own I/O
// thread, and libzmq 4.3 handles running out of descriptors there badly: an ipc:// listener
// asserts (the trainer aborts), a tcp:// one retries the accept at once for as long as the
// shortage lasts (a core spinning). The cap on connections (connection_cap.h) counts only the
// control plane's own, while the trainer's files, UCX's descriptors per consumer and other
// libraries take the rest. So the service thread stops listening (unbinds) while fewer than
// stop_below are free, listens again from listen_from, and refuses joins below stop_below (a
// join costs UCX descriptors). Connections made in a burst faster than the service thread wakes
// are accepted before it sees them: stop_below is that margin.
#pragma once

#include <cstddef>
#include <optional>

namespace modelcast::producer {

struct Descriptors {
  std::size_t free = 0;   // RLIMIT_NOFILE's soft limit less the descriptors open
  std::size_t limit = 0;  // that soft limit
  // 32 free, or an eighth of a smaller limit's (a producer at a limit of 64 serves 16 consumers);
  // listening again from twice that.
  std::size_t stop_below() const { return limit / 8 < 32 ? limit / 8 : 32; }
  std::size_t listen_from() const { return 2 * stop_below(); }
};

// The descriptors open counted in /proc/self/fd; free = 0 when they cannot be counted for want of
// a descriptor; nullopt where they cannot be counted otherwise (no /proc) or the limit is
// infinite. Any thread; costs a directory read of the open descriptors.
std::optional<Descriptors> free_descriptors();

}  // namespace modelcast::producer
