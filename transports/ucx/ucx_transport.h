// UCX (UCP) transport: tagged send/receive with rendezvous, which UCX maps per transport to its
// fastest zero-copy path (CMA or shared memory on one host, TCP or RDMA across hosts).
// UCX_TLS and UCX_NET_DEVICES apply as usual.
#pragma once

#include <chrono>
#include <memory>

#include "transports/transport.h"

namespace modelcast::transport {

struct UcxOptions {
  // One-sided access (export_region / import_region / post_read, over UCP RMA). Off by default:
  // it adds RMA lanes to every endpoint, and the two-sided path the exchange uses (tagged
  // rendezvous) is what was measured and load-tested; on only for users of one-sided reads.
  bool one_sided = false;
  // Endpoint ids on the wire are looked up in a table instead of being raw pointers (UCX's
  // PROTO_INDIRECT_ID), for endpoints without peer-failure detection too. The factory chooses
  // per side from UcxQuirks: on for receivers (consumers) where direct ids are unsafe for them
  // (a consumer on its producer's host would die when the producer dies mid-transfer: its read
  // of the dead producer's memory fails, UCX destroys the endpoint it made for the producer,
  // and the rendezvous requests still queued name that endpoint by its freed address); off for
  // senders where indirect ids assert on an endpoint whose sends never ended, which a
  // producer's endpoint to a dead consumer on its host has. A UCX_PROTO_INDIRECT_ID in the
  // environment wins over either.
  bool indirect_endpoint_ids = false;
  // How long destroying a region waits for receives/reads still writing into it, and sends still
  // reading it, where UCX may never end them (UcxQuirks); past it the worker is halted (sooner
  // where only sends are left whose endpoint was closed a second before: they never end).
  std::chrono::milliseconds release_timeout{5000};
  // How long a disconnected peer's sends may go on before its endpoint (one with peer-failure
  // handling) is closed by force, where UcxQuirks says forcing a busy TCP endpoint may crash: a
  // slow consumer's chunk under way ends within it; a peer that takes nothing is cut off after it.
  std::chrono::milliseconds busy_close_grace{30000};
  // How long the progress thread polls after its last progress before it sleeps (IdleSpin says
  // why it is a time): with 100 us one consumer's update over shared memory and TCP stayed
  // within the noise of the old 2,000 idle rounds, and eight relaying consumers on rate-limited
  // links within 2 % of never polling (bench/RESULTS.md, fan-out).
  std::chrono::microseconds idle_spin{100};
};

// Throws Error(kTransport) if UCX cannot be initialised.
std::unique_ptr<Transport> make_ucx_transport(UcxOptions options = {});

}  // namespace modelcast::transport
