// The C ABI's names of statuses and dtypes (include/modelcast/modelcast.h). A file of its own:
// libmodelcast_sidecar compiles it in too, as sidecar_c.h declares them (through modelcast.h)
// for clients that link only that library.
#include "core/c_api/c_boundary.h"

#include <iterator>

using namespace modelcast::c_api;

extern "C" {

const char* mc_status_name(mc_status status) {
  switch (raw(status)) {
    case MC_OK: return "ok";
    case MC_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case MC_ERR_LAYOUT_MISMATCH: return "layout_mismatch";
    case MC_ERR_PROTOCOL: return "protocol";
    case MC_ERR_TRANSPORT: return "transport";
    case MC_ERR_TIMEOUT: return "timeout";
    case MC_ERR_INTEGRITY: return "integrity";
    case MC_ERR_STATE: return "state";
    case MC_ERR_RESOURCE: return "resource";
    case MC_ERR_AUTHENTICATION: return "authentication";
    case MC_ERR_UNKNOWN: return "unknown";
    default: return "?";
  }
}

const char* mc_dtype_name(mc_dtype dtype) {
  // Same spelling as modelcast::dtype_name, but NUL-terminated by construction.
  static constexpr const char* kNames[] = {"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool", "f8e4m3"};
  static_assert(std::size(kNames) == MC_DTYPE_F8E4M3 + 1, "a name for every mc_dtype");
  int d = raw(dtype);
  if (!valid_dtype(d)) return nullptr;
  return kNames[d];
}

size_t mc_dtype_size(mc_dtype dtype) {
  int d = raw(dtype);
  if (!valid_dtype(d)) return 0;
  return modelcast::dtype_size(static_cast<modelcast::DType>(d));
}

}  // extern "C"
