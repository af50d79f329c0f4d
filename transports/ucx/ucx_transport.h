// UCX (UCP) transport: tagged send/receive with rendezvous, which UCX maps per transport to its
// fastest zero-copy path (CMA or shared memory on one host, TCP or RDMA across hosts).
// UCX_TLS and UCX_NET_DEVICES apply as usual.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace modelcast::transport {

// Throws Error(kTransport) if UCX cannot be initialised.
std::unique_ptr<Transport> make_ucx_transport();

}  // namespace modelcast::transport
