// The C ABI's view entry points and small helpers (include/modelcast/modelcast.h).
#include "core/c_api/c_boundary.h"

#include <iterator>
#include <map>
#include <string>

using namespace modelcast::c_api;

namespace {

// The index-th tensor of a view; throws (through guarded) naming a NULL view or an index past
// the end.
const modelcast::TensorView& tensor_at(const mc_view_t* view, std::size_t index) {
  require(view, "view");
  if (index >= view->tensors.size()) {
    invalid("tensor index " + std::to_string(index) + " is out of range (version " +
            std::to_string(view->view.version()) + " has " + std::to_string(view->tensors.size()) + " tensors)");
  }
  return view->tensors[index];
}

}  // namespace

extern "C" {

const char* mc_last_error(void) { return last_error().c_str(); }

mc_status mc_set_last_error(mc_status status, const char* text) {
  set_last_error(text ? text : "");
  return status;
}

// ---- views ---------------------------------------------------------------------------------

void mc_view_release(mc_view_t* view) {
  // The last view of a buffer deregisters it on the transport's thread, and waits for it.
  const CancelHeldOff held;
  try {
    delete view;
  } catch (...) {
  }
}

uint64_t mc_view_version(const mc_view_t* view) { return view == nullptr ? 0 : view->view.version(); }

int64_t mc_view_step(const mc_view_t* view) { return view == nullptr ? 0 : view->view.step(); }

size_t mc_view_tensor_count(const mc_view_t* view) { return view == nullptr ? 0 : view->tensors.size(); }

size_t mc_view_metadata_count(const mc_view_t* view) { return view == nullptr ? 0 : view->metadata.size(); }

mc_status mc_view_metadata_at(const mc_view_t* view, size_t index, const char** key, const char** value) {
  if (key != nullptr) *key = nullptr;
  if (value != nullptr) *value = nullptr;
  return guarded(__func__, [&] {
    require(view, "view");
    require(key, "key");
    require(value, "value");
    if (index >= view->metadata.size()) {
      invalid("metadata index " + std::to_string(index) + " is out of range (version " +
              std::to_string(view->view.version()) + " has " + std::to_string(view->metadata.size()) + " entries)");
    }
    *key = view->metadata[index].first->c_str();
    *value = view->metadata[index].second->c_str();
    return MC_OK;
  });
}

const char* mc_view_metadata_get(const mc_view_t* view, const char* key) {
  const char* result = nullptr;
  guarded(__func__, [&] {
    require(view, "view");
    require(key, "key");
    const auto& metadata = view->view.metadata();
    if (auto it = metadata.find(key); it != metadata.end()) result = it->second.c_str();
    return MC_OK;
  });
  return result;
}

mc_status mc_view_find_tensor(const mc_view_t* view, const char* name, mc_tensor_info* out) {
  return guarded(__func__, [&] {
    require(view, "view");
    require(name, "name");
    require(out, "out");
    std::call_once(view->indexed, [&] {
      view->by_name.reserve(view->tensors.size());
      for (std::size_t i = 0; i < view->tensors.size(); ++i) view->by_name.emplace(view->tensors[i].spec->name, i);
    });
    if (auto it = view->by_name.find(name); it != view->by_name.end()) {
      fill_info(view->tensors[it->second], out);
      return MC_OK;
    }
    invalid("version " + std::to_string(view->view.version()) + " has no tensor '" + name + "'");
  });
}

mc_status mc_view_tensor_at(const mc_view_t* view, size_t index, mc_tensor_info* out) {
  return guarded(__func__, [&] {
    require(view, "view");
    require(out, "out");
    fill_info(tensor_at(view, index), out);
    return MC_OK;
  });
}

mc_status mc_view_tensor_scales(const mc_view_t* view, size_t index, const float** scales, size_t* count,
                                size_t* scale_block) {
  if (scales != nullptr) *scales = nullptr;
  if (count != nullptr) *count = 0;
  if (scale_block != nullptr) *scale_block = 0;
  return guarded(__func__, [&] {
    require(view, "view");
    require(scales, "scales");
    require(count, "count");
    require(scale_block, "scale_block");
    const auto& t = tensor_at(view, index);
    if (!t.scales.empty()) *scales = t.scales.data();
    *count = t.scales.size();
    *scale_block = t.scale_block;
    return MC_OK;
  });
}

mc_status mc_view_tensor_box(const mc_view_t* view, size_t index, const int64_t** offset, const int64_t** whole_shape,
                             size_t* ndim) {
  if (offset != nullptr) *offset = nullptr;
  if (whole_shape != nullptr) *whole_shape = nullptr;
  if (ndim != nullptr) *ndim = 0;
  return guarded(__func__, [&] {
    require(view, "view");
    require(offset, "offset");
    require(whole_shape, "whole_shape");
    require(ndim, "ndim");
    const auto& t = tensor_at(view, index);
    if (!t.is_part()) return MC_OK;
    *offset = t.box_offset.data();
    *whole_shape = t.whole_shape.data();
    *ndim = t.whole_shape.size();
    return MC_OK;
  });
}

}  // extern "C"
