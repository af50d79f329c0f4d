// The ZeroMQ context of a producer's control plane or a consumer's link to its producer.
#pragma once

#include <string>

#include <zmq.hpp>

namespace modelcast::wire {

// A new context whose threads and descriptors could be had just now; throws Error(kResource)
// naming `owner` and the resource if not. Why: libzmq starts its I/O and reaper threads, each with
// an epoll and an event descriptor, with a context's first socket, and ends the process (an
// assert) when it cannot make one, so a trainer at its limit of threads or descriptors would be
// aborted inside a constructor instead of getting an error. A probe, not a reservation (see
// check_threads_can_start).
zmq::context_t new_context(const std::string& owner);

}  // namespace modelcast::wire
