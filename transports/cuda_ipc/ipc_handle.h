// What a producer sends so that a consumer on the same host can map a device snapshot slot
// (the CUDA IPC path). Plain data, no CUDA headers: it travels in the FetchReply.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace modelcast::cuda_ipc {

inline constexpr std::size_t kHandleBytes = 64;  // CUDA_IPC_HANDLE_SIZE (sizeof cudaIpcMemHandle_t)

struct IpcExport {
  std::uint32_t slot = 0;    // the producer's snapshot slot: with the incarnation, the cache key
  int device = 0;            // the producer's device ordinal (informational: handles are global)
  std::uint64_t size = 0;    // bytes of the exported allocation (the whole slot)
  std::array<std::byte, kHandleBytes> handle{};  // cudaIpcMemHandle_t, opaque

  bool operator==(const IpcExport&) const = default;
};

}  // namespace modelcast::cuda_ipc
