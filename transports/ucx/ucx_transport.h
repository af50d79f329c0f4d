// UCX (UCP) transport: tagged send/receive with rendezvous, which UCX maps per transport to its
// fastest zero-copy path (CMA or shared memory on one host, TCP or RDMA across hosts).
// UCX_TLS and UCX_NET_DEVICES apply as usual.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace modelcast::transport {

struct UcxOptions {
  // One-sided access (export_region / import_region / post_read, over UCP RMA). Off by default:
  // it adds RMA lanes to every endpoint, and the two-sided path the exchange uses (tagged
  // rendezvous) is what was measured and load-tested; on only for users of one-sided reads.
  bool one_sided = false;
};

// Throws Error(kTransport) if UCX cannot be initialised.
std::unique_ptr<Transport> make_ucx_transport(UcxOptions options = {});

}  // namespace modelcast::transport
