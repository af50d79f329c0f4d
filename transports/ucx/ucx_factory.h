// The UCX transport as the registry creates it by name ("ucx"); this header pulls in no UCX.
#pragma once

#include "transports/transport_factory.h"

namespace modelcast::transport {

TransportFactory ucx_transport_factory();

}  // namespace modelcast::transport
