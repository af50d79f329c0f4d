#include "transports/builtin_transports.h"

#include "transports/cuda_ipc/cuda_ipc_factory.h"
#include "transports/loopback/loopback_factory.h"
#include "transports/ucx/ucx_factory.h"

namespace modelcast::transport {

// Spelled out rather than filled by static initialisers in each library: the order is the
// default preference, and an explicit list cannot lose an entry to initialisation order or to
// a linker that drops an object nothing references.
const std::vector<TransportFactory>& builtin_transports() {
  static const std::vector<TransportFactory> all = {
      ucx_transport_factory(),
      cuda_ipc_transport_factory(),
      loopback_transport_factory(),
  };
  return all;
}

}  // namespace modelcast::transport
