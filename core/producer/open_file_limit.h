// The producer's open-file limit.
#pragma once

#include <cstdint>

#include <spdlog/spdlog.h>

namespace modelcast::producer {

// Raises the soft limit on open files to the hard one (logged when it does), and returns the soft
// limit in effect. Why: every ZeroMQ connection costs the producer a descriptor whatever
// max_consumers says, and UCX needs descriptors of its own: at the usual soft limit of 1,024, a
// thousand idle connections stopped every consumer from joining. Servers raise the soft limit to
// the hard one at start; so does the producer, before anything of it opens one (ZeroMQ and UCX
// poll with epoll, so descriptors past 1,024 are fine). Any thread; the limit is the process's.
std::uint64_t raise_open_file_limit(spdlog::logger& log);

}  // namespace modelcast::producer
