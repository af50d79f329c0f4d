// The ZeroMQ context of a producer's control plane or a consumer's link to its producer.
#pragma once

#include <string>

#include <zmq.hpp>

namespace modelcast::wire {

// A new context whose threads could start just now; throws Error(kResource) naming `owner` if they
// could not. Why: libzmq starts its I/O and reaper threads with a context's first socket and ends
// the process (an assert) when pthread_create fails, so a trainer at its limit of threads would be
// aborted inside a constructor instead of getting an error (check_threads_can_start's limits hold).
zmq::context_t context_with_threads(const std::string& owner);

}  // namespace modelcast::wire
