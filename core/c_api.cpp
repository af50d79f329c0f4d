// C ABI (include/modelcast/modelcast.h) over the C++ API. Every entry point catches every
// exception and turns it into an mc_status plus a thread-local last-error text.
#include "modelcast/modelcast.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/keys.h"
#include "modelcast/model_view.h"
#include "modelcast/producer.h"
#include "modelcast/tensor.h"
#include "modelcast/types.h"

struct mc_producer {
  std::unique_ptr<modelcast::Producer> producer;
  std::string endpoint;  // the bound control endpoint, kept for mc_producer_endpoint
};

struct mc_consumer {
  std::unique_ptr<modelcast::Consumer> consumer;
};

struct mc_view {
  modelcast::ModelView view;
  std::vector<modelcast::TensorView> tensors;  // registration order, built once
  std::vector<std::pair<const std::string*, const std::string*>> metadata;
};

namespace {

using modelcast::ErrorCode;

static_assert(MC_ERR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::kInvalidArgument));
static_assert(MC_ERR_LAYOUT_MISMATCH == static_cast<int>(ErrorCode::kLayoutMismatch));
static_assert(MC_ERR_PROTOCOL == static_cast<int>(ErrorCode::kProtocol));
static_assert(MC_ERR_TRANSPORT == static_cast<int>(ErrorCode::kTransport));
static_assert(MC_ERR_TIMEOUT == static_cast<int>(ErrorCode::kTimeout));
static_assert(MC_ERR_INTEGRITY == static_cast<int>(ErrorCode::kIntegrity));
static_assert(MC_ERR_STATE == static_cast<int>(ErrorCode::kState));
static_assert(MC_ERR_RESOURCE == static_cast<int>(ErrorCode::kResource));
static_assert(MC_ERR_AUTHENTICATION == static_cast<int>(ErrorCode::kAuthentication));

// A field added after the first release is read only from callers whose struct has it.
template <typename Options, typename Field>
bool has_field(const Options& options, const Field& field) {
  auto offset = static_cast<std::size_t>(reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&options));
  return options.struct_size >= offset + sizeof(Field);
}
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
static_assert(MC_MEMORY_HOST == static_cast<int>(modelcast::MemoryKind::kHost));
static_assert(MC_MEMORY_CUDA == static_cast<int>(modelcast::MemoryKind::kCuda));

// Size of the first release of each options struct: the fields every caller sets through _init.
constexpr std::size_t kProducerOptionsV1 = offsetof(mc_producer_options, transfer_chunk_bytes) + sizeof(std::size_t);
constexpr std::size_t kConsumerOptionsV1 = offsetof(mc_consumer_options, producer_timeout_ms) + sizeof(std::int64_t);
constexpr std::size_t kTensorDescV1 = offsetof(mc_tensor_desc, device) + sizeof(int);

thread_local std::string t_last_error;

// A failure detected by the C layer itself, before the C++ API is called.
struct CError {
  mc_status status;
  std::string message;
};

mc_status fail(const char* function, mc_status status, const std::string& message) noexcept {
  try {
    t_last_error = std::string(function) + ": " + message;
  } catch (...) {
    // Out of memory while formatting: keep whatever text was there.
  }
  return status;
}

// Runs `body` and converts every exception into a status; `body` returns MC_OK or throws.
template <typename Body>
mc_status guarded(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const CError& e) {
    return fail(function, e.status, e.message);
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

[[noreturn]] void invalid(const std::string& message) { throw CError{MC_ERR_INVALID_ARGUMENT, message}; }

void require(const void* pointer, const char* what) {
  if (pointer == nullptr) invalid(std::string(what) + " is NULL");
}

// A C caller may pass any int where a C enum is expected, but in C++ loading an enum object
// whose value lies outside the enumerators' range is undefined. Read the bits as an int.
template <typename Enum>
int raw(const Enum& value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int));
  int bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

bool valid_dtype(int dtype) { return dtype >= MC_DTYPE_F64 && dtype <= MC_DTYPE_BOOL; }

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
    invalid(label + " has an unknown dtype " + std::to_string(dtype) + " (valid: 0..9, see mc_dtype)");
  }
  if (memory != MC_MEMORY_HOST && memory != MC_MEMORY_CUDA) {
    invalid(label + " has an unknown memory kind " + std::to_string(memory));
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

}  // namespace

extern "C" {

const char* mc_last_error(void) { return t_last_error.c_str(); }

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
  static constexpr const char* kNames[] = {"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"};
  int d = raw(dtype);
  if (!valid_dtype(d)) return nullptr;
  return kNames[d];
}

size_t mc_dtype_size(mc_dtype dtype) {
  int d = raw(dtype);
  if (!valid_dtype(d)) return 0;
  return modelcast::dtype_size(static_cast<modelcast::DType>(d));
}

// ---- producer ------------------------------------------------------------------------------

void mc_producer_options_init(mc_producer_options* options) {
  if (options == nullptr) return;
  const modelcast::ProducerOptions defaults;
  *options = mc_producer_options{};
  options->struct_size = sizeof(mc_producer_options);
  options->model_name = "model";
  options->control_endpoint = "tcp://127.0.0.1:0";
  options->snapshot_slots = defaults.snapshot_slots;
  options->integrity = defaults.integrity ? 1 : 0;
  options->first_version = defaults.first_version;
  options->lease_timeout_ms = defaults.lease_timeout.count();
  options->heartbeat_interval_ms = defaults.heartbeat_interval.count();
  options->transfer_chunk_bytes = defaults.transfer_chunk_bytes;
  options->max_consumers = defaults.max_consumers;
}

mc_status mc_write_key_pair(const char* path, int overwrite, char public_key_out[41]) {
  return guarded(__func__, [&] {
    require(path, "path");
    auto keys = modelcast::generate_key_pair();
    modelcast::save_key_pair(keys, path, overwrite != 0);
    if (public_key_out != nullptr) std::snprintf(public_key_out, 41, "%s", keys.public_key.c_str());
    return MC_OK;
  });
}

void mc_tensor_desc_init(mc_tensor_desc* desc) {
  if (desc == nullptr) return;
  *desc = mc_tensor_desc{};
  desc->struct_size = sizeof(mc_tensor_desc);
  desc->dtype = MC_DTYPE_F32;
  desc->memory = MC_MEMORY_HOST;
  desc->device = 0;
}

mc_status mc_producer_create(const mc_producer_options* options, mc_producer_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(out, "out");
    mc_producer_options defaults;
    if (options == nullptr) {
      mc_producer_options_init(&defaults);
      options = &defaults;
    }
    if (options->struct_size < kProducerOptionsV1) {
      invalid("options.struct_size is " + std::to_string(options->struct_size) +
              ": call mc_producer_options_init first");
    }
    require(options->model_name, "options.model_name");
    require(options->control_endpoint, "options.control_endpoint");
    if (options->lease_timeout_ms <= 0) invalid("options.lease_timeout_ms must be > 0");
    if (options->heartbeat_interval_ms <= 0) invalid("options.heartbeat_interval_ms must be > 0");
    modelcast::ProducerOptions o;
    o.model_name = options->model_name;
    o.control_endpoint = options->control_endpoint;
    o.snapshot_slots = options->snapshot_slots;
    o.integrity = options->integrity != 0;
    o.first_version = options->first_version;
    o.lease_timeout = std::chrono::milliseconds(options->lease_timeout_ms);
    o.heartbeat_interval = std::chrono::milliseconds(options->heartbeat_interval_ms);
    o.transfer_chunk_bytes = options->transfer_chunk_bytes;
    if (has_field(*options, options->max_consumers)) {
      if (options->key_file != nullptr) o.key_file = options->key_file;
      if (options->allowed_consumer_key_count > 0) require(options->allowed_consumer_keys, "options.allowed_consumer_keys");
      for (std::size_t i = 0; i < options->allowed_consumer_key_count; ++i) {
        if (options->allowed_consumer_keys[i] == nullptr) {
          invalid("options.allowed_consumer_keys[" + std::to_string(i) + "] is NULL");
        }
        o.allowed_consumer_keys.emplace_back(options->allowed_consumer_keys[i]);
      }
      o.allow_any_consumer = options->allow_any_consumer != 0;
      o.allow_plaintext_remote = options->allow_plaintext_remote != 0;
      o.max_consumers = options->max_consumers;
    }
    auto handle = std::make_unique<mc_producer>();
    handle->producer = std::make_unique<modelcast::Producer>(std::move(o));
    handle->endpoint = handle->producer->control_endpoint();
    *out = handle.release();
    return MC_OK;
  });
}

void mc_producer_destroy(mc_producer_t* producer) {
  try {
    delete producer;
  } catch (...) {
    // Destructors do not throw; nothing may cross the ABI regardless.
  }
}

const char* mc_producer_endpoint(const mc_producer_t* producer) {
  if (producer == nullptr) {
    fail(__func__, MC_ERR_INVALID_ARGUMENT, "producer is NULL");
    return nullptr;
  }
  return producer->endpoint.c_str();
}

mc_status mc_producer_register_tensor(mc_producer_t* producer, const char* name, mc_dtype dtype, size_t ndim,
                                      const int64_t* shape, const void* data) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    producer->producer->register_tensor(tensor_ref(name, raw(dtype), ndim, shape, data, MC_MEMORY_HOST, 0));
    return MC_OK;
  });
}

mc_status mc_producer_register_tensor_desc(mc_producer_t* producer, const mc_tensor_desc* desc) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    require(desc, "desc");
    if (desc->struct_size < kTensorDescV1) invalid("desc.struct_size is not set: call mc_tensor_desc_init first");
    producer->producer->register_tensor(
        tensor_ref(desc->name, raw(desc->dtype), desc->ndim, desc->shape, desc->data, raw(desc->memory), desc->device));
    return MC_OK;
  });
}

mc_status mc_producer_prepare(mc_producer_t* producer) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    producer->producer->prepare();
    return MC_OK;
  });
}

mc_status mc_producer_publish(mc_producer_t* producer, int64_t step, const char* const* keys,
                              const char* const* values, size_t count, mc_publish_result* out) {
  if (out != nullptr) *out = mc_publish_result{};
  return guarded(__func__, [&] {
    require(producer, "producer");
    modelcast::Metadata metadata;
    if (count > 0) {
      require(keys, "keys");
      require(values, "values");
      for (std::size_t i = 0; i < count; ++i) {
        if (keys[i] == nullptr) invalid("metadata key " + std::to_string(i) + " is NULL");
        if (values[i] == nullptr) invalid(std::string("metadata value for key '") + keys[i] + "' is NULL");
        metadata[keys[i]] = values[i];
      }
    }
    auto ticket = producer->producer->publish(step, metadata);
    if (out != nullptr) {
      out->version = ticket.version;
      out->step = ticket.step;
      out->stall_ns = ticket.stall.count();
      out->bytes = ticket.bytes;
    }
    return MC_OK;
  });
}

mc_status mc_producer_wait_for_consumers(const mc_producer_t* producer, size_t count, int64_t timeout_ms) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    auto timeout = timeout_of(timeout_ms, "timeout_ms");
    if (!producer->producer->wait_for_consumers(count, timeout)) {
      throw CError{MC_ERR_TIMEOUT, std::to_string(count) + " consumer(s) did not join within " +
                                       std::to_string(timeout_ms) + " ms"};
    }
    return MC_OK;
  });
}

mc_status mc_producer_get_stats(const mc_producer_t* producer, mc_producer_stats* out) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    require(out, "out");
    auto s = producer->producer->stats();
    *out = mc_producer_stats{};
    out->latest_version = s.latest_version;
    out->versions_published = s.versions_published;
    out->deliveries = s.deliveries;
    out->failed_deliveries = s.failed_deliveries;
    out->leases_expired = s.leases_expired;
    out->bad_messages = s.bad_messages;
    out->bytes_sent = s.bytes_sent;
    out->consumers = s.consumers;
    out->last_stall_ns = s.last_stall.count();
    copy_text(s.transport, out->transport, sizeof(out->transport));
    return MC_OK;
  });
}

// ---- consumer ------------------------------------------------------------------------------

void mc_consumer_options_init(mc_consumer_options* options) {
  if (options == nullptr) return;
  const modelcast::ConsumerOptions defaults;
  *options = mc_consumer_options{};
  options->struct_size = sizeof(mc_consumer_options);
  options->model_name = "model";
  options->buffers = defaults.buffers;
  options->producer_timeout_ms = defaults.producer_timeout.count();
  options->transfer_timeout_ms = defaults.transfer_timeout.count();
  options->max_model_bytes = defaults.max_model_bytes;
}

mc_status mc_consumer_create(const mc_consumer_options* options, mc_consumer_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(out, "out");
    require(options, "options");
    if (options->struct_size < kConsumerOptionsV1) {
      invalid("options.struct_size is " + std::to_string(options->struct_size) +
              ": call mc_consumer_options_init first");
    }
    require(options->producer_endpoint, "options.producer_endpoint");
    require(options->model_name, "options.model_name");
    if (options->producer_timeout_ms <= 0) invalid("options.producer_timeout_ms must be > 0");
    modelcast::ConsumerOptions o;
    o.producer_endpoint = options->producer_endpoint;
    o.model_name = options->model_name;
    if (options->consumer_name != nullptr) o.consumer_name = options->consumer_name;
    o.buffers = options->buffers;
    if (options->caller_buffer_count > 0) {
      require(options->caller_buffers, "options.caller_buffers");
      require(options->caller_buffer_sizes, "options.caller_buffer_sizes");
      for (std::size_t i = 0; i < options->caller_buffer_count; ++i) {
        if (options->caller_buffers[i] == nullptr) invalid("options.caller_buffers[" + std::to_string(i) + "] is NULL");
        o.caller_buffers.emplace_back(static_cast<std::byte*>(options->caller_buffers[i]),
                                      options->caller_buffer_sizes[i]);
      }
    }
    if (options->expected_layout_count > 0) {
      require(options->expected_layout, "options.expected_layout");
      for (std::size_t i = 0; i < options->expected_layout_count; ++i) {
        const mc_tensor_desc& d = options->expected_layout[i];
        if (d.struct_size < kTensorDescV1) {
          invalid("options.expected_layout[" + std::to_string(i) + "].struct_size is not set: call mc_tensor_desc_init");
        }
        o.expected_layout.push_back(tensor_ref(d.name, raw(d.dtype), d.ndim, d.shape, nullptr, raw(d.memory), d.device).spec);
      }
    }
    o.producer_timeout = std::chrono::milliseconds(options->producer_timeout_ms);
    if (has_field(*options, options->max_model_bytes)) {
      if (options->producer_public_key != nullptr) o.producer_public_key = options->producer_public_key;
      if (options->key_file != nullptr) o.key_file = options->key_file;
      o.allow_plaintext_remote = options->allow_plaintext_remote != 0;
      if (options->transfer_timeout_ms <= 0) invalid("options.transfer_timeout_ms must be > 0");
      o.transfer_timeout = std::chrono::milliseconds(options->transfer_timeout_ms);
      o.max_model_bytes = options->max_model_bytes;
    }
    auto handle = std::make_unique<mc_consumer>();
    handle->consumer = std::make_unique<modelcast::Consumer>(std::move(o));
    *out = handle.release();
    return MC_OK;
  });
}

void mc_consumer_destroy(mc_consumer_t* consumer) {
  try {
    delete consumer;
  } catch (...) {
  }
}

mc_status mc_consumer_acquire(const mc_consumer_t* consumer, mc_view_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    require(out, "out");
    *out = make_view(consumer->consumer->acquire());
    return MC_OK;
  });
}

mc_status mc_consumer_wait_for_version(const mc_consumer_t* consumer, uint64_t version, int64_t timeout_ms,
                                       mc_view_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    require(out, "out");
    auto timeout = timeout_of(timeout_ms, "timeout_ms");
    auto view = consumer->consumer->wait_for_version(version, timeout);
    if (!view) {
      throw CError{MC_ERR_TIMEOUT, "version " + std::to_string(version) + " did not arrive within " +
                                       std::to_string(timeout_ms) + " ms (current version " +
                                       std::to_string(consumer->consumer->stats().current_version) + ")"};
    }
    *out = make_view(std::move(view));
    return MC_OK;
  });
}

mc_status mc_consumer_get_stats(const mc_consumer_t* consumer, mc_consumer_stats* out) {
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    require(out, "out");
    auto s = consumer->consumer->stats();
    *out = mc_consumer_stats{};
    out->current_version = s.current_version;
    out->versions_installed = s.versions_installed;
    out->versions_rejected = s.versions_rejected;
    out->transfers_aborted = s.transfers_aborted;
    out->bad_messages = s.bad_messages;
    out->reconnects = s.reconnects;
    out->bytes_received = s.bytes_received;
    out->last_update_latency_ns = s.last_update_latency.count();
    out->last_notify_latency_ns = s.last_notify_latency.count();
    copy_text(s.last_error, out->last_error, sizeof(out->last_error));
    return MC_OK;
  });
}

// ---- views ---------------------------------------------------------------------------------

void mc_view_release(mc_view_t* view) {
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
    for (const auto& t : view->tensors) {
      if (t.spec->name == name) {
        fill_info(t, out);
        return MC_OK;
      }
    }
    invalid("version " + std::to_string(view->view.version()) + " has no tensor '" + name + "'");
  });
}

mc_status mc_view_tensor_at(const mc_view_t* view, size_t index, mc_tensor_info* out) {
  return guarded(__func__, [&] {
    require(view, "view");
    require(out, "out");
    if (index >= view->tensors.size()) {
      invalid("tensor index " + std::to_string(index) + " is out of range (version " +
              std::to_string(view->view.version()) + " has " + std::to_string(view->tensors.size()) + " tensors)");
    }
    fill_info(view->tensors[index], out);
    return MC_OK;
  });
}

}  // extern "C"
