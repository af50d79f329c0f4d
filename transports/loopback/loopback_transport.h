// An in-process transport: peers are other loopback transports of the same process, and a
// send is a memcpy into the matching posted receive. For unit tests of the producer's and
// consumer's stages without a network transport, and as the smallest complete implementation
// of the seam.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace modelcast::transport {

// Completions run on the transport's own thread, as transport.h asks of every transport.
std::unique_ptr<Transport> make_loopback_transport();

}  // namespace modelcast::transport
