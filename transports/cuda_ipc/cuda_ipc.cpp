#include "transports/cuda_ipc/cuda_ipc.h"

#include <cstring>
#include <string>

#include "modelcast/error.h"

#if MODELCAST_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/device/cuda_device_scope.h"
#endif

namespace modelcast::cuda_ipc {

#if MODELCAST_HAVE_CUDA

static_assert(sizeof(cudaIpcMemHandle_t) == kHandleBytes, "cudaIpcMemHandle_t changed size");

namespace {

std::string cuda_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw Error(ErrorCode::kTransport, "CUDA IPC: " + what + " failed: " + cuda_text(status));
}


}  // namespace

bool cuda_ipc_available() noexcept { return true; }

IpcExport export_allocation(const void* base, std::uint64_t size, std::uint32_t slot) {
  cudaPointerAttributes attributes{};
  check(cudaPointerGetAttributes(&attributes, base), "cudaPointerGetAttributes");
  if (attributes.type != cudaMemoryTypeDevice) {
    throw Error(ErrorCode::kInvalidArgument, "CUDA IPC: slot " + std::to_string(slot) + " is not device memory");
  }
  device::CudaDeviceScope scope(attributes.device);
  cudaIpcMemHandle_t handle{};
  check(cudaIpcGetMemHandle(&handle, const_cast<void*>(base)), "cudaIpcGetMemHandle");
  IpcExport out;
  out.slot = slot;
  out.device = attributes.device;
  out.size = size;
  std::memcpy(out.handle.data(), &handle, kHandleBytes);
  return out;
}

IpcOps cuda_ipc_ops(int device) {
  IpcOps ops;
  ops.open = [device](const IpcExport& source) -> void* {
    device::CudaDeviceScope scope(device);
    cudaIpcMemHandle_t handle{};
    std::memcpy(&handle, source.handle.data(), kHandleBytes);
    void* base = nullptr;
    check(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle (slot " + std::to_string(source.slot) + ")");
    return base;
  };
  ops.close = [device](void* base, const IpcExport&) noexcept {
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    if (previous != device) cudaSetDevice(device);
    cudaIpcCloseMemHandle(base);
    if (previous != device) cudaSetDevice(previous);
  };
  return ops;
}

#else  // !MODELCAST_HAVE_CUDA

bool cuda_ipc_available() noexcept { return false; }

IpcExport export_allocation(const void*, std::uint64_t, std::uint32_t) {
  throw Error(ErrorCode::kState, "modelcast was built without CUDA: no CUDA IPC");
}

IpcOps cuda_ipc_ops(int) { throw Error(ErrorCode::kState, "modelcast was built without CUDA: no CUDA IPC"); }

#endif

}  // namespace modelcast::cuda_ipc
