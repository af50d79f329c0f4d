#include "transports/loopback/loopback_factory.h"

#include "transports/loopback/loopback_transport.h"

namespace modelcast::transport {

TransportFactory loopback_transport_factory() {
  // Not on by default: it serves only a producer and consumer of one process, and tests of one
  // process want the default transports exercised.
  return {"loopback", false, [](Side) { return make_loopback_transport(); }, {}};
}

}  // namespace modelcast::transport
