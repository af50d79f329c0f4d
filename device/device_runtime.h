// The device calls the library makes, behind one small interface: allocation, stream-ordered
// copies, events, the pmix64 digest, and IPC export/open of allocations. This layer (device/)
// is the only code that calls CUDA: core/ and transports/ build on it and reach a device through
// this interface alone.
//
// Why an interface: CI machines have no GPU, and the device paths (a producer snapshotting
// device tensors, a consumer receiving into device memory, CUDA IPC between processes) must
// still run end to end in the ordinary test suite. Two implementations:
//   "cuda"       the CUDA runtime (cuda_runtime.cpp, built with MODELCAST_HAVE_CUDA)
//   "simulated"  host memory standing in for device memory (simulated_runtime.cpp): every
//                allocation is a memfd another process can map from its IPC handle, each stream
//                is a thread that runs its work in order, events complete when the stream
//                reaches them. It keeps CUDA's rules that the library relies on: IPC handles
//                cover whole allocations, a process cannot open its own handle, copies and
//                digests are ordered only by their stream and by events, never by the host,
//                a host function must not call the runtime (the process ends if it does), and
//                events and digests go only on streams of their own device.
// Selection (device_runtime()): MODELCAST_DEVICE=simulated | cuda | none; unset means "cuda"
// where a CUDA build finds a device, otherwise none.
// The simulation can also corrupt one byte copied into device memory on demand
// (MODELCAST_SIMULATED_FLIP_BYTE, see simulated_runtime.cpp), for the integrity tests, and fail
// a copy when a test says so (simulated_faults.h).
//
// Handles are opaque pointers: a StreamHandle is a cudaStream_t under "cuda", which is what a
// trainer passes to Producer::publish to order the snapshot after its own work.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "modelcast/export.h"
#include "modelcast/types.h"

namespace modelcast::device {

using StreamHandle = void*;
using EventHandle = void*;

inline constexpr std::size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)
using IpcHandle = std::array<std::byte, kIpcHandleBytes>;

// Where a pointer points: host memory, or a device allocation (its base and size).
struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;
  const void* allocation_base = nullptr;  // device memory only
  std::size_t allocation_size = 0;
};

// A tensor inside a device buffer, for the digest.
struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

// One run of a gather: `bytes` from the source's byte `src_offset` to the destination's `dst_offset`.
struct ByteRun {
  std::uint64_t src_offset = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t bytes = 0;
};

// Every method is thread-safe. Failures throw Error(kTransport) naming the call (kResource for
// an allocation that does not fit, kInvalidArgument for a pointer or device that is not valid).
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual std::string name() const = 0;
  virtual int device_count() const = 0;

  // Device memory on `device`; a whole allocation, exportable over IPC. Released by release().
  virtual void* allocate(int device, std::size_t bytes) = 0;
  virtual void release(void* pointer) noexcept = 0;
  virtual PointerInfo pointer_info(const void* pointer) const = 0;

  // Host memory the device copies to and from at full speed (pinned); release_host() frees it.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void release_host(void* pointer) noexcept = 0;

  // Pins existing host memory for full-speed copies (cudaHostRegister), until unpin_host(). The
  // memory must stay allocated until then. Pinning costs about a millisecond per GiB: once per
  // buffer, never per copy.
  virtual void pin_host(void* pointer, std::size_t bytes) = 0;
  virtual void unpin_host(void* pointer) noexcept = 0;

  // A stream on `device` that does not synchronise with the legacy default stream (so staging
  // never stalls a trainer's or server's default-stream work); order against that stream by
  // recording an event on it (stream nullptr) and waiting on the event.
  virtual StreamHandle create_stream(int device) = 0;
  virtual void destroy_stream(StreamHandle stream) noexcept = 0;  // waits for its work first
  // An event on `device`: it can be recorded only on streams of that device.
  virtual EventHandle create_event(int device) = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;

  // Queues a copy of n bytes in any direction (host or device at either end) on `stream`. With
  // pageable (unpinned) host memory at either end CUDA may return only once the stream has reached
  // and done the copy: never queue one behind work that this thread must release later.
  virtual void copy_async(void* destination, const void* source, std::size_t n, StreamHandle stream) = 0;
  // Completes `event` when `stream` reaches this point. Stream nullptr: the legacy default stream
  // of the event's device, whichever device is current.
  virtual void record(EventHandle event, StreamHandle stream) = 0;
  // Work queued on `stream` after this waits for the event's last record.
  virtual void wait(StreamHandle stream, EventHandle event) = 0;
  virtual void synchronize(EventHandle event) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;
  // True once the event's last record has completed (cudaEventQuery); never blocks.
  virtual bool ready(EventHandle event) = 0;
  // Runs `function` on a runtime thread when `stream` reaches this point; later work on the
  // stream waits for it to return (cudaLaunchHostFunc). It must not call the runtime.
  virtual void host_function(StreamHandle stream, std::function<void()> function) = 0;

  // pmix64-v1 digests (pmix64.h) of `ranges` inside device memory at `base`,
  // ordered after earlier work on `stream`; blocks until computed.
  virtual std::vector<std::uint64_t> digest(int device, const void* base, std::span<const ByteRange> ranges,
                                            StreamHandle stream) = 0;

  // Device-side shaping of a version a consumer received (parts and dtypes): the arithmetic is
  // device/element_format.h's, so the results are bit for bit a host consumer's.
  // Queues, on `stream`, the copies of `runs` from `source` to `destination` (device memory of
  // the stream's device, not overlapping).
  virtual void gather_async(void* destination, const void* source, std::span<const ByteRun> runs,
                            StreamHandle stream) = 0;
  // Queues, on `stream`, the conversion of `count` elements at `source` (dtype `from`) into
  // `destination` (dtype `to`); both f32, f16 or bf16 (kInvalidArgument otherwise); equal dtypes
  // copy the bytes as they are (NaN payloads too), as the host does.
  virtual void convert_async(void* destination, DType to, const void* source, DType from, std::size_t count,
                             StreamHandle stream) = 0;
  // fp8 e4m3 codes of `count` elements at `source` (f32, f16 or bf16) into `destination`, one
  // scale (amax / 448 over the finite elements) per `block` elements, or one for all with block
  // 0; ordered after earlier work on `stream`; blocks until done and returns the scales.
  virtual std::vector<float> quantize_fp8(void* destination, const void* source, DType from, std::size_t count,
                                          std::size_t block, StreamHandle stream) = 0;

  // A handle another process opens to map the allocation starting at `base` (whole
  // allocations only: an interior pointer throws kInvalidArgument).
  virtual IpcHandle export_allocation(const void* base) = 0;
  // Maps a peer process's allocation on `device`; throws kTransport for a handle of this
  // process or one that cannot be opened. close_ipc() unmaps it.
  virtual void* open_ipc(const IpcHandle& handle, int device) = 0;
  virtual void close_ipc(void* base) noexcept = 0;
};

// The runtime this process uses (see the file comment), created on first use; nullptr when
// there is none. Never destroyed: device memory may be released from static destructors.
// Throws Error(kInvalidArgument) for an unknown MODELCAST_DEVICE value.
// Exported (though not public API) for the Python binding's testing helpers, which must
// allocate simulated device memory in the same runtime instance the library checks pointers
// against: a second instance's memfds would look like host memory to this one.
MODELCAST_API DeviceRuntime* device_runtime();

// The same, or Error(kState) saying how to get one (for a caller that was given device memory).
DeviceRuntime& require_device_runtime(const std::string& why);

// Host memory pinned while this lives (declare it after the memory it pins, so it goes first).
class HostPin {
 public:
  HostPin(DeviceRuntime& runtime, void* pointer, std::size_t bytes) : runtime_(runtime), pointer_(pointer) {
    runtime_.pin_host(pointer, bytes);
  }
  ~HostPin() { runtime_.unpin_host(pointer_); }
  HostPin(const HostPin&) = delete;
  HostPin& operator=(const HostPin&) = delete;

 private:
  DeviceRuntime& runtime_;
  void* pointer_;
};

// Factories, for tests that want one explicitly. make_cuda_runtime() returns nullptr in a build
// without CUDA or on a machine without a device.
std::unique_ptr<DeviceRuntime> make_simulated_runtime(int devices = 2);
std::unique_ptr<DeviceRuntime> make_cuda_runtime();

}  // namespace modelcast::device
