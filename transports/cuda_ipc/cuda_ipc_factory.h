// The CUDA IPC transport as the registry creates it by name ("cuda_ipc").
#pragma once

#include "transports/transport_factory.h"

namespace modelcast::transport {

TransportFactory cuda_ipc_transport_factory();

}  // namespace modelcast::transport
