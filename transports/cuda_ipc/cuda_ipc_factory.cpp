#include "transports/cuda_ipc/cuda_ipc_factory.h"

#include "transports/cuda_ipc/cuda_ipc_transport.h"

namespace modelcast::transport {

TransportFactory cuda_ipc_transport_factory() {
  // Available only with a device runtime, so a process without one does not offer it by default.
  return {"cuda_ipc", true, [](Side) { return make_cuda_ipc_transport(); }, [] { return cuda_ipc_available(); }};
}

}  // namespace modelcast::transport
