// The CUDA IPC transport: one-sided reads of a producer's device snapshot slots by a consumer
// on the same host, with no host memory in between.
//
// The producer registers each device slot and exports it once (export_region: the
// allocation's IPC handle, its size, the slot's index and a random id of this transport); the
// FetchReply carries that descriptor (ipc_descriptor.h) and the consumer reads the version out
// of the mapped slot with device-to-device copies. Mappings are opened once and cached by (exporter, slot)
// (IpcHandleCache): opening costs milliseconds, and a producer reuses a handful of slots for
// every version. A slot that comes back with a new handle, or a new exporter (the producer
// restarted), closes the old mapping once no read holds it.
//
// Capabilities: device -> device and device -> host, reach host, one-sided only. Everything
// goes through the device runtime (device/), so the simulated device runs it in CI.
// Completions run on the runtime's thread (a host function queued after each copy).
#pragma once

#include <memory>

#include "transports/transport.h"

namespace modelcast::transport {

// True where the process has a device runtime (a GPU, or MODELCAST_DEVICE=simulated).
bool cuda_ipc_available();

// Throws Error(kState) where cuda_ipc_available() is false.
std::unique_ptr<Transport> make_cuda_ipc_transport();

}  // namespace modelcast::transport
