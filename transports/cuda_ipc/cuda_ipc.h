// CUDA calls of the IPC path. Compiled by the host compiler against the CUDA runtime
// under MODELCAST_HAVE_CUDA; without CUDA every function throws Error(kState) (and
// cuda_ipc_available() is false), so callers need no #if.
#pragma once

#include <cstdint>

#include "transports/cuda_ipc/ipc_handle.h"
#include "transports/cuda_ipc/ipc_handle_cache.h"

namespace modelcast::cuda_ipc {

bool cuda_ipc_available() noexcept;

// Producer: exports the device allocation starting at `base` (a snapshot slot the producer
// allocated with cudaMalloc: IPC handles cover whole allocations, so `base` must be the start
// of one) with cudaIpcGetMemHandle. Exported once per slot; the handle stays valid until the
// allocation is freed. Throws Error(kInvalidArgument) for host memory, Error(kTransport) for a
// CUDA failure.
IpcExport export_allocation(const void* base, std::uint64_t size, std::uint32_t slot);

// Consumer: open/close for IpcHandleCache on the consumer's `device`:
// cudaIpcOpenMemHandle(cudaIpcMemLazyEnablePeerAccess) / cudaIpcCloseMemHandle, each with
// `device` current (the caller's current device is restored). Opening a handle exported by the
// same process fails (CUDA's rule): the IPC path is for separate processes.
IpcOps cuda_ipc_ops(int device);

}  // namespace modelcast::cuda_ipc
