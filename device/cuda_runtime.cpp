// The CUDA runtime behind DeviceRuntime. Compiled by the host compiler against cudart under
// MODELCAST_HAVE_CUDA; without CUDA make_cuda_runtime() returns nullptr.
//
// Threads: CUDA's own; `mutex_` guards this runtime's tables: the allocations it made, which is
// how an export checks that it was given an allocation's base (cudaIpcGetMemHandle on an interior
// pointer silently returns the whole allocation's handle, and the importer would map the base),
// its IPC mappings, the host memory it pinned, and the device of each event.
#include "device/device_runtime.h"

#include "modelcast/error.h"

#if MODELCAST_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "device/cuda_device_scope.h"

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "device/convert_kernel.h"
#include "device/pmix64.h"
#endif

namespace modelcast::device {

#if MODELCAST_HAVE_CUDA
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes, "cudaIpcMemHandle_t changed size");

void check(cudaError_t status, const std::string& what, ErrorCode code = ErrorCode::kTransport) {
  if (status == cudaSuccess) return;
  // A failed call also leaves its error as the thread's last error, which the next kernel launch
  // (it can only read cudaGetLastError) would report as its own: an allocation that did not fit
  // failed the next digest. Taken here, once it is reported; a sticky error comes back anyway.
  cudaGetLastError();
  if (status == cudaErrorMemoryAllocation) code = ErrorCode::kResource;
  throw Error(code, "CUDA: " + what + " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}


class CudaRuntime final : public DeviceRuntime {
 public:
  explicit CudaRuntime(int devices) : devices_(devices) {}
  std::string name() const override { return "cuda"; }
  int device_count() const override { return devices_; }

  void* allocate(int device, std::size_t bytes) override {
    check_device(device);
    CudaDeviceScope scope(device);
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)), "cudaMalloc(" + std::to_string(bytes) + ")");
    std::lock_guard lock(mutex_);
    owned_[p] = Owned{bytes, device};
    return p;
  }
  void release(void* pointer) noexcept override {
    {
      std::lock_guard lock(mutex_);
      owned_.erase(pointer);
    }
    cudaFree(pointer);
  }

  PointerInfo pointer_info(const void* pointer) const override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, pointer) != cudaSuccess) {
      cudaGetLastError();  // a plain host pointer on older drivers: not sticky, clear it
      return {};
    }
    if (a.type != cudaMemoryTypeDevice) return {};
    PointerInfo info{MemoryKind::kCuda, a.device, nullptr, 0};
    std::lock_guard lock(mutex_);
    auto it = owned_.upper_bound(pointer);
    if (it != owned_.begin()) {
      --it;
      auto offset = static_cast<const char*>(pointer) - static_cast<const char*>(it->first);
      if (offset >= 0 && static_cast<std::size_t>(offset) < it->second.size) {
        info.allocation_base = it->first;
        info.allocation_size = it->second.size;
      }
    }
    return info;
  }

  void* allocate_host(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), cudaHostAllocPortable), "cudaHostAlloc");
    return p;
  }
  void release_host(void* pointer) noexcept override { cudaFreeHost(pointer); }

  // Memory another library (a transport built with CUDA) registered already counts as pinned, and
  // is left for that library to unregister.
  void pin_host(void* pointer, std::size_t bytes) override {
    cudaError_t status = cudaHostRegister(pointer, bytes, cudaHostRegisterPortable);
    if (status == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();
      return;
    }
    check(status, "cudaHostRegister");
    std::lock_guard lock(mutex_);
    pinned_.insert(pointer);
  }
  void unpin_host(void* pointer) noexcept override {
    {
      std::lock_guard lock(mutex_);
      if (!pinned_.erase(pointer)) return;
    }
    if (cudaHostUnregister(pointer) != cudaSuccess) cudaGetLastError();  // not left for the next call
  }

  StreamHandle create_stream(int device) override {
    check_device(device);
    CudaDeviceScope scope(device);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    std::lock_guard lock(mutex_);
    stream_devices_[s] = device;
    return s;
  }
  void destroy_stream(StreamHandle stream) noexcept override {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream));
    std::lock_guard lock(mutex_);
    stream_devices_.erase(stream);
  }
  EventHandle create_event(int device) override {
    check_device(device);
    CudaDeviceScope scope(device);
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    std::lock_guard lock(mutex_);
    event_devices_[e] = device;
    return e;
  }
  void destroy_event(EventHandle event) noexcept override {
    {
      std::lock_guard lock(mutex_);
      event_devices_.erase(event);
    }
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  void copy_async(void* destination, const void* source, std::size_t n, StreamHandle stream) override {
    check(cudaMemcpyAsync(destination, source, n, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
          "cudaMemcpyAsync");
  }
  // The legacy default stream (nullptr) is per device, and the caller's current device need not
  // be the event's (a trainer on GPU 1 may call publish() with GPU 0 current): record on the
  // event's device, where its work and the tensors are.
  void record(EventHandle event, StreamHandle stream) override {
    std::optional<CudaDeviceScope> scope;
    if (!stream) scope.emplace(event_device(event));
    check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  }
  void wait(StreamHandle stream, EventHandle event) override {
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
          "cudaStreamWaitEvent");
  }
  void synchronize(EventHandle event) override {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  }
  void synchronize_stream(StreamHandle stream) override {
    check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  }

  bool ready(EventHandle event) override {
    cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) return false;
    check(status, "cudaEventQuery");
    return true;
  }

  void host_function(StreamHandle stream, std::function<void()> function) override {
    auto* owned = new std::function<void()>(std::move(function));
    cudaError_t status = cudaLaunchHostFunc(
        static_cast<cudaStream_t>(stream),
        [](void* data) {
          auto* f = static_cast<std::function<void()>*>(data);
          (*f)();
          delete f;
        },
        owned);
    if (status != cudaSuccess) delete owned;
    check(status, "cudaLaunchHostFunc");
  }

  std::vector<std::uint64_t> digest(int device, const void* base, std::span<const ByteRange> ranges,
                                    StreamHandle stream) override {
    std::vector<pmix64::Range> r;
    r.reserve(ranges.size());
    for (const auto& x : ranges) r.push_back({x.offset, x.size});
    return pmix64::digest_device(device, base, r, static_cast<CUstream_st*>(stream));
  }

  // Runs of equal length at a constant stride on both sides (the rows of a box) go as one 2D
  // copy: a box of a large matrix is thousands of runs, and a copy call costs microseconds.
  void gather_async(void* destination, const void* source, std::span<const ByteRun> runs,
                    StreamHandle stream) override {
    CudaDeviceScope scope(stream_device(stream));  // work goes to a stream of the current device
    auto* dst = static_cast<char*>(destination);
    const auto* src = static_cast<const char*>(source);
    const auto s = static_cast<cudaStream_t>(stream);
    constexpr std::uint64_t kMaxPitch = std::uint64_t{1} << 31;  // within every device's cudaDevAttrMaxPitch
    for (std::size_t i = 0; i < runs.size();) {
      const ByteRun& first = runs[i];
      std::size_t n = 1;
      if (i + 1 < runs.size() && runs[i + 1].bytes == first.bytes && runs[i + 1].src_offset > first.src_offset &&
          runs[i + 1].dst_offset > first.dst_offset) {
        const std::uint64_t src_pitch = runs[i + 1].src_offset - first.src_offset;
        const std::uint64_t dst_pitch = runs[i + 1].dst_offset - first.dst_offset;
        if (src_pitch >= first.bytes && dst_pitch >= first.bytes && src_pitch < kMaxPitch && dst_pitch < kMaxPitch) {
          while (i + n < runs.size() && runs[i + n].bytes == first.bytes &&
                 runs[i + n].src_offset == first.src_offset + n * src_pitch &&
                 runs[i + n].dst_offset == first.dst_offset + n * dst_pitch) {
            ++n;
          }
          check(cudaMemcpy2DAsync(dst + first.dst_offset, dst_pitch, src + first.src_offset, src_pitch, first.bytes, n,
                                  cudaMemcpyDeviceToDevice, s),
                "cudaMemcpy2DAsync (gather of " + std::to_string(n) + " runs)");
          i += n;
          continue;
        }
      }
      check(cudaMemcpyAsync(dst + first.dst_offset, src + first.src_offset, first.bytes, cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync (gather)");
      ++i;
    }
  }

  void convert_async(void* destination, DType to, const void* source, DType from, std::size_t count,
                     StreamHandle stream) override {
    CudaDeviceScope scope(stream_device(stream));
    if (to == from) {  // the bytes as they are, as the host copies them (NaN payloads included)
      check(cudaMemcpyAsync(destination, source, count * dtype_size(to), cudaMemcpyDeviceToDevice,
                            static_cast<cudaStream_t>(stream)),
            "cudaMemcpyAsync (a conversion to the same dtype)");
      return;
    }
    check(static_cast<cudaError_t>(kernels::launch_convert(destination, element(to), source, element(from), count,
                                                           static_cast<CUstream_st*>(stream))),
          "the conversion kernel (" + std::to_string(count) + " elements)");
  }

  std::vector<float> quantize_fp8(void* destination, const void* source, DType from, std::size_t count,
                                  std::size_t block, StreamHandle stream) override {
    CudaDeviceScope scope(stream_device(stream));
    const auto s = static_cast<cudaStream_t>(stream);
    const std::size_t per = block == 0 ? std::max<std::size_t>(count, 1) : block;
    const std::size_t blocks = count == 0 ? 1 : count / per + (count % per != 0);
    std::vector<float> scales(blocks, 1.0f);
    if (count == 0) return scales;
    // Scratch on the stream's pool: the amaxes' bits, then the scales.
    void* scratch = nullptr;
    check(cudaMallocAsync(&scratch, blocks * 8, s), "cudaMallocAsync (fp8 scales)");
    auto* amax_bits = static_cast<std::uint32_t*>(scratch);
    auto* device_scales = reinterpret_cast<float*>(amax_bits + blocks);
    try {
      check(cudaMemsetAsync(amax_bits, 0, blocks * 4, s), "cudaMemsetAsync (fp8 amax)");
      check(static_cast<cudaError_t>(kernels::launch_block_amax(source, element(from), count, per, amax_bits,
                                                                static_cast<CUstream_st*>(stream))),
            "the fp8 amax kernel");
      check(static_cast<cudaError_t>(kernels::launch_quantize_fp8(static_cast<std::uint8_t*>(destination), source,
                                                                  element(from), count, per, amax_bits, device_scales,
                                                                  static_cast<CUstream_st*>(stream))),
            "the fp8 quantization kernel");
      check(cudaMemcpyAsync(scales.data(), device_scales, blocks * 4, cudaMemcpyDeviceToHost, s),
            "cudaMemcpyAsync (fp8 scales)");
      check(cudaFreeAsync(scratch, s), "cudaFreeAsync (fp8 scales)");
      scratch = nullptr;
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize (fp8 quantization)");
    } catch (...) {
      if (scratch) cudaFreeAsync(scratch, s);
      throw;
    }
    return scales;
  }

  IpcHandle export_allocation(const void* base) override {
    int device = 0;
    {
      std::lock_guard lock(mutex_);
      auto it = owned_.find(base);
      if (it == owned_.end()) {
        throw Error(ErrorCode::kInvalidArgument, "CUDA IPC: export needs the base of an allocation of this runtime");
      }
      device = it->second.device;
    }
    CudaDeviceScope scope(device);
    cudaIpcMemHandle_t h{};
    check(cudaIpcGetMemHandle(&h, const_cast<void*>(base)), "cudaIpcGetMemHandle");
    IpcHandle out{};
    std::memcpy(out.data(), &h, sizeof h);
    return out;
  }
  void* open_ipc(const IpcHandle& handle, int device) override {
    check_device(device);
    CudaDeviceScope scope(device);
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle.data(), sizeof h);
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    std::lock_guard lock(mutex_);
    opened_[p] = device;
    return p;
  }
  // Closed with the device it was opened on current.
  void close_ipc(void* base) noexcept override {
    int device = 0;
    {
      std::lock_guard lock(mutex_);
      auto it = opened_.find(base);
      if (it == opened_.end()) return;
      device = it->second;
      opened_.erase(it);
    }
    int previous = 0;
    if (cudaGetDevice(&previous) == cudaSuccess && previous != device) cudaSetDevice(device);
    if (cudaIpcCloseMemHandle(base) != cudaSuccess) cudaGetLastError();
    if (previous != device) cudaSetDevice(previous);
  }

 private:
  void check_device(int device) const {
    if (device < 0 || device >= devices_) {
      throw Error(ErrorCode::kInvalidArgument,
                  "no CUDA device " + std::to_string(device) + " (there are " + std::to_string(devices_) + ")");
    }
  }

  static kernels::Element element(DType dtype) {
    switch (dtype) {
      case DType::kF32: return kernels::Element::kF32;
      case DType::kF16: return kernels::Element::kF16;
      case DType::kBF16: return kernels::Element::kBF16;
      default:
        throw Error(ErrorCode::kInvalidArgument, "device conversions are between f32, f16 and bf16, not " +
                                                     std::string(dtype_name(dtype)));
    }
  }

  // The device of a stream this runtime made (kernels launch only on the current device's
  // streams); the current device for the legacy default stream.
  int stream_device(StreamHandle stream) const {
    if (stream) {
      std::lock_guard lock(mutex_);
      if (auto it = stream_devices_.find(stream); it != stream_devices_.end()) return it->second;
    }
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) cudaGetLastError();
    return current;
  }

  int event_device(EventHandle event) const {
    std::lock_guard lock(mutex_);
    auto it = event_devices_.find(event);
    return it == event_devices_.end() ? 0 : it->second;
  }

  struct Owned {
    std::size_t size;
    int device;
  };
  const int devices_;
  mutable std::mutex mutex_;
  std::map<const void*, Owned> owned_;  // guarded by mutex_: this runtime's allocations
  std::map<void*, int> opened_;         // guarded by mutex_: IPC mappings and their device
  std::set<void*> pinned_;              // guarded by mutex_: host memory this runtime pinned
  std::map<const void*, int> event_devices_;  // guarded by mutex_: each live event's device
  std::map<const void*, int> stream_devices_;  // guarded by mutex_: each live stream's device
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_cuda_runtime() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    cudaGetLastError();
    return nullptr;
  }
  return std::make_unique<CudaRuntime>(count);
}

#else

std::unique_ptr<DeviceRuntime> make_cuda_runtime() { return nullptr; }

#endif

}  // namespace modelcast::device
