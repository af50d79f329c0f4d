#include "transports/delivery_path.h"

#include "modelcast/error.h"

namespace modelcast {
namespace {

bool is_device(MemoryKind kind) { return kind == MemoryKind::kCuda; }

const char* kind_name(MemoryKind kind) { return is_device(kind) ? "device" : "host"; }

// Whether the transport moves device memory matters only to the ucx_cuda path: elsewhere it would
// mislead. (The wording names UCX, as the path does: error texts are left as users know them.)
std::string describe(const PathQuery& q, DeliveryPath path) {
  std::string s = std::string(kind_name(q.producer)) + " -> " + kind_name(q.consumer);
  s += q.same_host ? ", same host" : ", different hosts";
  if (path == DeliveryPath::kUcxCuda) s += q.ucx_cuda ? ", UCX with CUDA memory" : ", UCX without CUDA memory";
  return s;
}

[[noreturn]] void refuse(const PathQuery& q, DeliveryPath path, const char* reason) {
  throw Error(ErrorCode::kInvalidArgument, "delivery path '" + std::string(delivery_path_name(path)) +
                                               "' cannot serve " + describe(q, path) + ": " + reason);
}

}  // namespace

DeliveryPath select_delivery_path(const PathQuery& q) {
  const bool any_device = is_device(q.producer) || is_device(q.consumer);
  const bool both_device = is_device(q.producer) && is_device(q.consumer);
  if (!q.forced) {
    if (!any_device) return DeliveryPath::kHostUcx;
    if (both_device && q.same_host) return DeliveryPath::kCudaIpc;
    return q.ucx_cuda ? DeliveryPath::kUcxCuda : DeliveryPath::kStaged;
  }
  const DeliveryPath path = *q.forced;
  switch (path) {
    case DeliveryPath::kHostUcx:
      if (any_device) refuse(q, path, "it moves host memory only");
      return path;
    case DeliveryPath::kCudaIpc:
      if (!both_device) refuse(q, path, "it needs device memory on both sides");
      if (!q.same_host) refuse(q, path, "CUDA IPC handles open only on the exporting host");
      return path;
    case DeliveryPath::kUcxCuda:
      if (!any_device) refuse(q, path, "neither side is device memory (use host_ucx)");
      if (!q.ucx_cuda) refuse(q, path, "the UCX in use has no CUDA memory support");
      return path;
    case DeliveryPath::kStaged:
      if (!any_device) refuse(q, path, "neither side is device memory, nothing to stage (use host_ucx)");
      return path;
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown delivery path " + std::to_string(static_cast<int>(path)));
}

std::string_view delivery_path_name(DeliveryPath path) noexcept {
  switch (path) {
    case DeliveryPath::kHostUcx: return "host_ucx";
    case DeliveryPath::kCudaIpc: return "cuda_ipc";
    case DeliveryPath::kUcxCuda: return "ucx_cuda";
    case DeliveryPath::kStaged: return "staged";
  }
  return "unknown";
}

std::optional<DeliveryPath> parse_delivery_path(std::string_view name) {
  if (name.empty() || name == "auto") return std::nullopt;
  for (auto path : {DeliveryPath::kHostUcx, DeliveryPath::kCudaIpc, DeliveryPath::kUcxCuda, DeliveryPath::kStaged}) {
    if (name == delivery_path_name(path)) return path;
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown delivery path '" + std::string(name) +
                                               "' (valid: auto, host_ucx, cuda_ipc, ucx_cuda, staged)");
}

}  // namespace modelcast
