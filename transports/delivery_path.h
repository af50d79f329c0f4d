// Which path a version takes from a producer's snapshot slot to a consumer's buffer.
//
// Pure decision logic, no CUDA: the producer evaluates it per consumer once it knows both
// memory kinds (the consumer's comes with its join), whether they share a host (boot ids) and
// whether the transport moves device memory itself (its Capabilities, on both sides).
//
// host_ucx and ucx_cuda are named after the one transport there was when they were introduced;
// the names are on the wire and in the public options (ConsumerOptions::path), so they stay.
// Any transport whose capabilities fit serves a path (transport_registry.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "modelcast/types.h"

namespace modelcast {

enum class DeliveryPath : std::uint8_t {
  kHostUcx = 0,  // host slot -> a two-sided transport -> host buffer (the only path without CUDA)
  kCudaIpc = 1,  // same host, device -> device: the consumer maps the slot (cudaIpcOpenMemHandle) and copies
  kUcxCuda = 2,  // the transport reads and/or writes device memory itself (e.g. GPUDirect RDMA)
  kStaged = 3,   // device -> pinned host bounce buffers -> transport -> (bounce ->) device, pipelined
};

struct PathQuery {
  MemoryKind producer = MemoryKind::kHost;  // where the snapshot slot lives
  MemoryKind consumer = MemoryKind::kHost;  // where the consumer's receive buffer lives
  bool same_host = false;                   // equal boot ids
  bool ucx_cuda = false;                    // the transport on both sides moves device memory
  std::optional<DeliveryPath> forced;       // the user's option; nullopt = choose automatically
};

// Automatic choice:
//   host   -> host                 : host_ucx
//   device -> device, same host    : cuda_ipc
//   any device side otherwise      : ucx_cuda when the transport moves device memory, else staged
// (device -> host and host -> device never use cuda_ipc: the consumer of a host buffer may
// have no CUDA context, and a host slot has nothing to export.)
// A forced path is checked against the combination; one that cannot serve it throws
// Error(kInvalidArgument) naming the path, the combination and the reason. Rules:
//   host_ucx  only host -> host
//   cuda_ipc  only device -> device on the same host
//   ucx_cuda  needs a device side and a transport that moves device memory
//   staged    needs a device side (a host -> host transfer has nothing to stage)
DeliveryPath select_delivery_path(const PathQuery& query);

// "host_ucx", "cuda_ipc", "ucx_cuda", "staged".
std::string_view delivery_path_name(DeliveryPath path) noexcept;
// Inverse of delivery_path_name; "auto" and "" give nullopt (automatic). Throws
// Error(kInvalidArgument) listing the valid names for anything else.
std::optional<DeliveryPath> parse_delivery_path(std::string_view name);

}  // namespace modelcast
