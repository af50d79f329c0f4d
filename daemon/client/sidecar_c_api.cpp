// The sidecar client's C ABI: handles around Client and View, exceptions turned into mc_status
// at this boundary (the same codes as modelcast.h), the message in a per-thread last error.
#include "modelcast/sidecar_c.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/cancel_held_off.h"
#include "modelcast/error.h"
#include "modelcast/sidecar.h"

struct mcs_client {
  std::unique_ptr<modelcast::sidecar::Client> client;
};

struct mcs_view {
  modelcast::sidecar::View view;
  std::vector<modelcast::TensorView> tensors;  // built once, so mc_tensor_info pointers stay valid
};

namespace {

thread_local std::string t_last_error;

mc_status fail(const char* function, mc_status status, const std::string& message) noexcept {
  try {
    t_last_error = std::string(function) + ": " + message;
  } catch (...) {
    // Out of memory while formatting: keep the previous text.
  }
  return status;
}

// Thread cancellation is held off in every call (common/cancel_held_off.h): a wait's request is
// on the daemon's connection, and a thread that ended before reading the answer would leave that
// connection unread for good; a release and a close talk to the daemon from destructors.
using modelcast::CancelHeldOff;

template <typename Body>
mc_status guarded(const char* function, Body&& body) noexcept {
  const CancelHeldOff held;
  try {
    return body();
  } catch (const modelcast::Error& e) {
    return fail(function, static_cast<mc_status>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(function, MC_ERR_RESOURCE, "out of memory");
  } catch (const std::exception& e) {
    return fail(function, MC_ERR_UNKNOWN, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return fail(function, MC_ERR_UNKNOWN, "unexpected non-standard exception");
  }
}

mcs_view_t* wrap(modelcast::sidecar::View view) {
  if (!view) return nullptr;
  auto* handle = new mcs_view{std::move(view), {}};
  handle->tensors = handle->view.tensors();
  return handle;
}

void fill(const modelcast::TensorView& t, mc_tensor_info* out) {
  out->name = t.name().c_str();
  out->dtype = static_cast<mc_dtype>(t.dtype());
  out->ndim = t.shape().size();
  out->shape = t.shape().empty() ? nullptr : t.shape().data();
  out->data = t.data;
  out->size_bytes = t.size_bytes();
  out->memory = MC_MEMORY_HOST;
  out->device = 0;
}

// Refuses a bad argument, naming it.
void require(bool holds, const std::string& what) {
  if (!holds) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, what);
}

// The index-th tensor, naming what is wrong as the core C ABI does (one message for a NULL view,
// a NULL out and an index past the end said none of which it was).
const modelcast::TensorView& tensor_at(const mcs_view_t* view, std::size_t index) {
  require(view != nullptr, "view is NULL");
  if (index >= view->tensors.size()) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "tensor index " + std::to_string(index) + " is out of range (version " +
                               std::to_string(view->view.version()) + " has " + std::to_string(view->tensors.size()) +
                               " tensors)");
  }
  return view->tensors[index];
}

}  // namespace

extern "C" {

const char* mcs_last_error(void) { return t_last_error.c_str(); }

mc_status mcs_client_open(const char* socket_path, const char* model, int64_t connect_timeout_ms, mcs_client_t** out) {
  return guarded("mcs_client_open", [&] {
    if (out != nullptr) *out = nullptr;  // whatever else is wrong
    require(out != nullptr, "out is NULL");
    require(socket_path != nullptr, "socket_path is NULL");
    require(model != nullptr, "model is NULL");
    require(connect_timeout_ms >= 0, "connect_timeout_ms is negative (" + std::to_string(connect_timeout_ms) + ")");
    modelcast::sidecar::ClientOptions options;
    options.socket_path = socket_path;
    options.model = model;
    options.connect_timeout = std::chrono::milliseconds(connect_timeout_ms);
    *out = new mcs_client{std::make_unique<modelcast::sidecar::Client>(options)};
    return MC_OK;
  });
}

void mcs_client_close(mcs_client_t* client) {
  const CancelHeldOff held;
  delete client;
}

mc_status mcs_acquire(const mcs_client_t* client, mcs_view_t** out) {
  return guarded("mcs_acquire", [&] {
    if (out != nullptr) *out = nullptr;
    require(out != nullptr, "out is NULL");
    require(client != nullptr, "client is NULL");
    *out = wrap(client->client->acquire());
    return MC_OK;
  });
}

mc_status mcs_wait_for_version(const mcs_client_t* client, uint64_t version, int64_t timeout_ms, mcs_view_t** out) {
  return guarded("mcs_wait_for_version", [&] {
    if (out != nullptr) *out = nullptr;
    require(out != nullptr, "out is NULL");
    require(client != nullptr, "client is NULL");
    require(timeout_ms >= 0, "timeout_ms is negative (" + std::to_string(timeout_ms) + ")");
    *out = wrap(client->client->wait_for_version(version, std::chrono::milliseconds(timeout_ms)));
    if (*out == nullptr) {
      throw modelcast::Error(modelcast::ErrorCode::kTimeout, "no version >= " + std::to_string(version) + " within " +
                                                                 std::to_string(timeout_ms) + " ms");
    }
    return MC_OK;
  });
}

void mcs_view_release(mcs_view_t* view) {
  const CancelHeldOff held;
  delete view;
}
uint64_t mcs_view_version(const mcs_view_t* view) { return view ? view->view.version() : 0; }
int64_t mcs_view_step(const mcs_view_t* view) { return view ? view->view.step() : 0; }
size_t mcs_view_tensor_count(const mcs_view_t* view) { return view ? view->tensors.size() : 0; }

mc_status mcs_view_tensor_at(const mcs_view_t* view, size_t index, mc_tensor_info* out) {
  return guarded("mcs_view_tensor_at", [&] {
    require(out != nullptr, "out is NULL");
    fill(tensor_at(view, index), out);
    return MC_OK;
  });
}

mc_status mcs_view_tensor_scales(const mcs_view_t* view, size_t index, const float** scales, size_t* count,
                                 size_t* scale_block) {
  // Cleared on failure too, as mc_view_tensor_scales does: a caller that misses the status reads
  // no stale pointer.
  if (scales != nullptr) *scales = nullptr;
  if (count != nullptr) *count = 0;
  if (scale_block != nullptr) *scale_block = 0;
  return guarded("mcs_view_tensor_scales", [&] {
    require(scales != nullptr, "scales is NULL");
    require(count != nullptr, "count is NULL");
    require(scale_block != nullptr, "scale_block is NULL");
    const auto& t = tensor_at(view, index);
    *scales = t.scales.empty() ? nullptr : t.scales.data();
    *count = t.scales.size();
    *scale_block = t.scale_block;
    return MC_OK;
  });
}

mc_status mcs_view_tensor_box(const mcs_view_t* view, size_t index, const int64_t** offset, const int64_t** whole_shape,
                              size_t* ndim) {
  if (offset != nullptr) *offset = nullptr;
  if (whole_shape != nullptr) *whole_shape = nullptr;
  if (ndim != nullptr) *ndim = 0;
  return guarded("mcs_view_tensor_box", [&] {
    require(offset != nullptr, "offset is NULL");
    require(whole_shape != nullptr, "whole_shape is NULL");
    require(ndim != nullptr, "ndim is NULL");
    const auto& t = tensor_at(view, index);
    *offset = t.is_part() ? t.box_offset.data() : nullptr;
    *whole_shape = t.is_part() ? t.whole_shape.data() : nullptr;
    *ndim = t.whole_shape.size();
    return MC_OK;
  });
}

mc_status mcs_view_find_tensor(const mcs_view_t* view, const char* name, mc_tensor_info* out) {
  return guarded("mcs_view_find_tensor", [&] {
    require(view != nullptr, "view is NULL");
    require(name != nullptr, "name is NULL");
    require(out != nullptr, "out is NULL");
    // fill() points only into the held version (its specs and buffer), not into the TensorView.
    if (auto t = view->view.find(name)) {
      fill(*t, out);
      return MC_OK;
    }
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, std::string("no tensor '") + name + "'");
  });
}

const char* mcs_view_metadata_get(const mcs_view_t* view, const char* key) {
  // NULL is also "absent": the last error says which argument was NULL (or that memory ran out).
  if (view == nullptr || key == nullptr) {
    fail("mcs_view_metadata_get", MC_ERR_INVALID_ARGUMENT, view == nullptr ? "view is NULL" : "key is NULL");
    return nullptr;
  }
  try {  // the lookup builds a std::string, which may throw; nothing may cross the C boundary
    const auto& metadata = view->view.metadata();
    auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : it->second.c_str();
  } catch (...) {
    // Told apart from "absent" by the last error, as a NULL argument is.
    fail("mcs_view_metadata_get", MC_ERR_RESOURCE, "out of memory while looking up the key");
    return nullptr;
  }
}

}  // extern "C""
