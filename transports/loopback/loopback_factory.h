// The loopback transport as the registry creates it by name ("loopback").
#pragma once

#include "transports/transport_factory.h"

namespace modelcast::transport {

TransportFactory loopback_transport_factory();

}  // namespace modelcast::transport
