#include "core/c_api/c_boundary.h"

#include <algorithm>

#include "core/model/manifest.h"

namespace modelcast::c_api {

static_assert(MC_ERR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::kInvalidArgument));
static_assert(MC_ERR_LAYOUT_MISMATCH == static_cast<int>(ErrorCode::kLayoutMismatch));
static_assert(MC_ERR_PROTOCOL == static_cast<int>(ErrorCode::kProtocol));
static_assert(MC_ERR_TRANSPORT == static_cast<int>(ErrorCode::kTransport));
static_assert(MC_ERR_TIMEOUT == static_cast<int>(ErrorCode::kTimeout));
static_assert(MC_ERR_INTEGRITY == static_cast<int>(ErrorCode::kIntegrity));
static_assert(MC_ERR_STATE == static_cast<int>(ErrorCode::kState));
static_assert(MC_ERR_RESOURCE == static_cast<int>(ErrorCode::kResource));
static_assert(MC_ERR_AUTHENTICATION == static_cast<int>(ErrorCode::kAuthentication));

static_assert(MC_DTYPE_F64 == static_cast<int>(modelcast::DType::kF64));
static_assert(MC_DTYPE_F32 == static_cast<int>(modelcast::DType::kF32));
static_assert(MC_DTYPE_F16 == static_cast<int>(modelcast::DType::kF16));
static_assert(MC_DTYPE_BF16 == static_cast<int>(modelcast::DType::kBF16));
static_assert(MC_DTYPE_I64 == static_cast<int>(modelcast::DType::kI64));
static_assert(MC_DTYPE_I32 == static_cast<int>(modelcast::DType::kI32));
static_assert(MC_DTYPE_I16 == static_cast<int>(modelcast::DType::kI16));
static_assert(MC_DTYPE_I8 == static_cast<int>(modelcast::DType::kI8));
static_assert(MC_DTYPE_U8 == static_cast<int>(modelcast::DType::kU8));
static_assert(MC_DTYPE_BOOL == static_cast<int>(modelcast::DType::kBool));
static_assert(MC_DTYPE_F8E4M3 == static_cast<int>(modelcast::DType::kF8E4M3));
static_assert(MC_MEMORY_HOST == static_cast<int>(modelcast::MemoryKind::kHost));
static_assert(MC_MEMORY_CUDA == static_cast<int>(modelcast::MemoryKind::kCuda));

namespace {
thread_local std::string t_last_error;
}  // namespace

mc_status status_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument: return MC_ERR_INVALID_ARGUMENT;
    case ErrorCode::kLayoutMismatch: return MC_ERR_LAYOUT_MISMATCH;
    case ErrorCode::kProtocol: return MC_ERR_PROTOCOL;
    case ErrorCode::kTransport: return MC_ERR_TRANSPORT;
    case ErrorCode::kTimeout: return MC_ERR_TIMEOUT;
    case ErrorCode::kIntegrity: return MC_ERR_INTEGRITY;
    case ErrorCode::kState: return MC_ERR_STATE;
    case ErrorCode::kResource: return MC_ERR_RESOURCE;
    case ErrorCode::kAuthentication: return MC_ERR_AUTHENTICATION;
  }
  return MC_ERR_UNKNOWN;
}

const std::string& last_error() noexcept { return t_last_error; }

void set_last_error(const char* text) noexcept {
  try {
    t_last_error = text;
  } catch (...) {
    // Out of memory: keep whatever text was there.
  }
}

mc_status fail(const char* function, mc_status status, const std::string& message) noexcept {
  try {
    t_last_error = std::string(function) + ": " + message;
  } catch (...) {
    // Out of memory while formatting: keep whatever text was there.
  }
  return status;
}

[[noreturn]] void invalid(const std::string& message) { throw CError{MC_ERR_INVALID_ARGUMENT, message}; }

void require(const void* pointer, const char* what) {
  if (pointer == nullptr) invalid(std::string(what) + " is NULL");
}

void optional_text(const char* text, const char* what, std::string& into) {
  if (text == nullptr) return;
  if (*text == '\0') invalid(std::string(what) + " is \"\" (empty): leave it NULL for none");
  into = text;
}

std::chrono::milliseconds timeout_of(std::int64_t ms, const char* what) {
  if (ms < 0) invalid(std::string(what) + " is negative (" + std::to_string(ms) + ")");
  return std::chrono::milliseconds(ms);
}

// A descriptor's tensor as the C++ API takes it; checks what the C layer can see.
modelcast::TensorRef tensor_ref(const char* name, int dtype, std::size_t ndim, const std::int64_t* shape,
                                const void* data, int memory, int device) {
  require(name, "tensor name");
  std::string label = std::string("tensor '") + name + "'";
  if (!valid_dtype(dtype)) {
    invalid(label + " has an unknown dtype " + std::to_string(dtype) + " (valid: 0..10, see mc_dtype)");
  }
  if (memory != MC_MEMORY_HOST && memory != MC_MEMORY_CUDA) {
    invalid(label + " has an unknown memory kind " + std::to_string(memory));
  }
  // Before the shape is read: ndim elements are read from it.
  if (ndim > modelcast::ManifestLimits{}.max_rank) {
    invalid(label + " has ndim " + std::to_string(ndim) + "; the limit is " + std::to_string(modelcast::ManifestLimits{}.max_rank));
  }
  if (ndim > 0 && shape == nullptr) invalid(label + " has ndim " + std::to_string(ndim) + " but a NULL shape");
  modelcast::TensorRef ref;
  ref.spec.name = name;
  ref.spec.dtype = static_cast<modelcast::DType>(dtype);
  if (ndim > 0) ref.spec.shape.assign(shape, shape + ndim);
  ref.spec.memory = static_cast<modelcast::MemoryKind>(memory);
  ref.spec.device = device;
  ref.data = data;
  return ref;
}

void fill_info(const modelcast::TensorView& t, mc_tensor_info* out) {
  out->name = t.spec->name.c_str();
  out->dtype = static_cast<mc_dtype>(t.spec->dtype);
  out->ndim = t.spec->shape.size();
  out->shape = t.spec->shape.empty() ? nullptr : t.spec->shape.data();
  out->data = t.data;
  out->size_bytes = t.size_bytes();
  out->memory = static_cast<mc_memory_kind>(t.spec->memory);
  out->device = t.spec->device;
}

void copy_text(const std::string& text, char* out, std::size_t capacity) {
  std::size_t n = std::min(text.size(), capacity - 1);
  // Cut where a character starts: the header promises UTF-8, and names (quoted in errors) may be.
  if (n < text.size()) {
    while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  }
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

mc_view_t* make_view(modelcast::ModelView view) {
  if (!view) return nullptr;
  auto handle = std::make_unique<mc_view>();
  handle->tensors = view.tensors();
  for (const auto& [key, value] : view.metadata()) handle->metadata.emplace_back(&key, &value);
  handle->view = std::move(view);  // the map's nodes do not move: the pointers above stay valid
  return handle.release();
}

}  // namespace modelcast::c_api
