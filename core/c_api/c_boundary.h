// What every C entry point shares: the handle types behind the ABI's opaque pointers, the
// thread-local last error, the exception-to-status boundary and the argument checks.
// Internal to the C ABI's sources (core/c_api/*.cpp).
#pragma once

#include <cxxabi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/cancel_held_off.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/model_view.h"
#include "modelcast/modelcast.h"
#include "modelcast/producer.h"

// What the _init macros call (modelcast.h): this library's defaults, copied into the caller's
// `size` bytes (zeros past this library's struct, for fields of a later header it cannot know),
// struct_size set to `size`. `init` is the function of the macro's name.
template <typename Struct>
void init_sized(Struct* out, std::size_t size, void (*init)(Struct*)) {
  if (out == nullptr) return;
  Struct full;
  init(&full);
  full.struct_size = size;
  std::memcpy(static_cast<void*>(out), &full, size < sizeof full ? size : sizeof full);
  if (size > sizeof full) std::memset(reinterpret_cast<char*>(out) + sizeof full, 0, size - sizeof full);
}

struct mc_producer {
  std::unique_ptr<modelcast::Producer> producer;
  std::string endpoint;  // the bound control endpoint, kept for mc_producer_endpoint
  std::atomic<bool> waits_cancelled{false};  // tells a cancelled wait from a timeout
};

struct mc_consumer {
  std::unique_ptr<modelcast::Consumer> consumer;
  std::atomic<bool> waits_cancelled{false};  // tells a cancelled wait from a timeout
};

struct mc_view {
  modelcast::ModelView view;
  std::vector<modelcast::TensorView> tensors;  // registration order, built once
  std::vector<std::pair<const std::string*, const std::string*>> metadata;
  // Each name's first place in `tensors`, made at the first lookup by name: a scan per lookup
  // made finding every tensor quadratic. Any thread (a view is shared by its readers).
  mutable std::once_flag indexed;
  mutable std::unordered_map<std::string_view, std::size_t> by_name;
};

namespace modelcast::c_api {

using modelcast::ErrorCode;

// Size of the first release of each options struct: the fields every caller sets through _init.
constexpr std::size_t kProducerOptionsV1 = offsetof(mc_producer_options, transfer_chunk_bytes) + sizeof(std::size_t);
constexpr std::size_t kConsumerOptionsV1 = offsetof(mc_consumer_options, producer_timeout_ms) + sizeof(std::int64_t);
constexpr std::size_t kTensorDescV1 = offsetof(mc_tensor_desc, device) + sizeof(int);
constexpr std::size_t kSchedulerOptionsV1 = offsetof(mc_scheduler_options, max_candidates) + sizeof(int);

// A field added after the first release is read only from callers whose struct has it.
template <typename Options, typename Field>
bool has_field(const Options& options, const Field& field) {
  auto offset = static_cast<std::size_t>(reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&options));
  return options.struct_size >= offset + sizeof(Field);
}

// A failure detected by the C layer itself, before the C++ API is called.
struct CError {
  mc_status status;
  std::string message;
};

// The C status for a C++ error code. A code without a C counterpart would fail to compile here
// (-Wswitch); MC_ERR_UNKNOWN only for values outside ErrorCode.
mc_status status_of(modelcast::ErrorCode code) noexcept;

// Records "function: message" as this thread's last error and returns `status`.
mc_status fail(const char* function, mc_status status, const std::string& message) noexcept;
const std::string& last_error() noexcept;
// Replaces this thread's last error with `text` as it is (keeps the old text if out of memory).
void set_last_error(const char* text) noexcept;

// Thread cancellation is held off in every call but the pure waits (common/cancel_held_off.h):
// most calls change state across their blocking points (a publish waits while a helper thread
// writes into its stack frame, a destroy joins threads in a destructor).
using modelcast::CancelHeldOff;

// Runs `body` and converts every exception into a status; `body` returns MC_OK or throws.
// For a pure wait, which changes nothing across its blocking point (waiting for a version, for
// consumers): a thread cancelled there ends there. The forced unwind is let through (caught, the
// runtime aborts the process), so the function is not noexcept.
template <typename Body>
mc_status guarded_cancellable(const char* function, Body&& body) {
  try {
    return body();
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (const CError& e) {
    return fail(function, e.status, e.message);
  } catch (const modelcast::Error& e) {
    return fail(function, status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(function, MC_ERR_RESOURCE, "out of memory");
  } catch (const std::exception& e) {
    return fail(function, MC_ERR_UNKNOWN, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return fail(function, MC_ERR_UNKNOWN, "unexpected non-standard exception");
  }
}

// As guarded_cancellable, with cancellation held off for the call (CancelHeldOff): every call
// but the pure waits.
template <typename Body>
mc_status guarded(const char* function, Body&& body) {
  const CancelHeldOff held;
  return guarded_cancellable(function, std::forward<Body>(body));
}

[[noreturn]] void invalid(const std::string& message);
void require(const void* pointer, const char* what);
// An optional text whose absence means "none" (NULL): "" is refused, naming `what`, as it would
// read as none too. For a key, an empty variable meant an unkeyed plane without a word.
void optional_text(const char* text, const char* what, std::string& into);

// A C caller may pass any int where a C enum is expected, but in C++ loading an enum object
// whose value lies outside the enumerators' range is undefined. Read the bits as an int.
template <typename Enum>
int raw(const Enum& value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int));
  int bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline bool valid_dtype(int dtype) { return dtype >= MC_DTYPE_F64 && dtype <= MC_DTYPE_F8E4M3; }
std::chrono::milliseconds timeout_of(std::int64_t ms, const char* what);
// A descriptor's tensor as the C++ API takes it; checks what the C layer can see.
modelcast::TensorRef tensor_ref(const char* name, int dtype, std::size_t ndim, const std::int64_t* shape,
                                const void* data, int memory, int device);
void fill_info(const modelcast::TensorView& t, mc_tensor_info* out);
// Copies `text` into `out` (capacity > 0), cut to fit at a character boundary, NUL-terminated.
void copy_text(const std::string& text, char* out, std::size_t capacity);
mc_view_t* make_view(modelcast::ModelView view);

}  // namespace modelcast::c_api
