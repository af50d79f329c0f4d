// What a producer exports so that a consumer on the same host can map a device snapshot slot
// (the CUDA IPC path). Plain data, no device headers: it travels in the FetchReply inside the
// transport's region descriptor (ipc_descriptor.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace modelcast::cuda_ipc {

inline constexpr std::size_t kHandleBytes = 64;  // device::kIpcHandleBytes (sizeof cudaIpcMemHandle_t)

struct IpcExport {
  std::uint32_t slot = 0;    // the producer's snapshot slot: with the incarnation, the cache key
  int device = 0;            // the producer's device ordinal (informational: handles are global)
  std::uint64_t size = 0;    // bytes of the exported allocation (the whole slot)
  std::array<std::byte, kHandleBytes> handle{};  // the device runtime's IpcHandle, opaque

  bool operator==(const IpcExport&) const = default;
};

}  // namespace modelcast::cuda_ipc
