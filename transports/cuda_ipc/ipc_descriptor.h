// The descriptor the cuda_ipc transport exports for one device slot (export_region) and a
// consumer on the same host imports (import_region) from the FetchReply's region field, before
// it maps anything: the exporting transport's id, the slot, its device, its size and the
// device runtime's IPC handle of the slot's allocation.
//
// Layout, 96 bytes, little-endian, no padding:
//   [0, 8)    magic "mcipcrg1"
//   [8, 16)   exporter  u64  random id of the exporting transport (a new one: the producer restarted)
//   [16, 20)  slot      u32
//   [20, 24)  device    i32  >= 0
//   [24, 32)  size      u64  > 0: bytes of the slot a consumer may read
//   [32, 96)  handle    the runtime's IpcHandle, opaque
//
// The bytes come from a peer: decode checks the length, the magic and each field, and throws
// Error(kProtocol) naming what is wrong; nothing else leaves it (fuzz/fuzz_ipc_descriptor.cpp).
// Pure C++, no device: the fuzzer and the unit tests build it alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transports/cuda_ipc/ipc_handle.h"

namespace modelcast::cuda_ipc {

inline constexpr std::size_t kDescriptorBytes = 96;

struct IpcDescriptor {
  std::uint64_t exporter = 0;
  IpcExport source;

  bool operator==(const IpcDescriptor&) const = default;
};

// Throws Error(kInvalidArgument) for a negative device or a zero size (an export of nothing).
std::vector<std::byte> encode_descriptor(const IpcDescriptor& descriptor);
IpcDescriptor decode_descriptor(std::span<const std::byte> bytes);

}  // namespace modelcast::cuda_ipc
