// The simulated device: see device_runtime.h for what it keeps of CUDA's rules.
//
// Threads: each stream owns one worker thread that runs the stream's queued work in order; an
// event's state and a stream's queue and pending fault are guarded by their own mutexes. The
// allocation table (`mutex_`) and the armed fault (`faults_mutex_`) are touched by the calling
// threads only. Ranges are checked when work is queued, so queued work cannot fail, except by a
// fault a test injects (simulated_faults.h), which the stream reports as CUDA would: once, at
// the next event recorded after it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "device/element_format.h"
#include "device/pmix64.h"
#include "device/device_runtime.h"
#include "device/simulated_faults.h"
#include "modelcast/error.h"

namespace modelcast::device {
namespace {

constexpr char kMagic[8] = {'m', 'c', 's', 'i', 'm', 'd', 'v', '1'};

// The IPC handle's layout inside its 64 bytes.
struct SimHandle {
  char magic[8];
  std::int32_t pid;
  std::int32_t fd;
  std::uint64_t size;
  std::uint64_t token;  // also in the memfd's name: a reused descriptor number is detected
  std::int32_t device;
};
static_assert(sizeof(SimHandle) <= kIpcHandleBytes);

std::string memfd_name(std::uint64_t token) { return "modelcast-simdev-" + std::to_string(token); }

class SimEvent {
 public:
  explicit SimEvent(int device) : device_(device) {}
  int device() const { return device_; }
  std::uint64_t arm() {
    std::lock_guard lock(mutex_);
    return ++recorded_;
  }
  std::uint64_t armed() {
    std::lock_guard lock(mutex_);
    return recorded_;
  }
  // `error`: a failure of the stream's work before this point, reported by the next wait.
  void complete(std::uint64_t generation, std::string error = {}) {
    {
      std::lock_guard lock(mutex_);
      completed_ = std::max(completed_, generation);
      if (!error.empty()) error_ = std::move(error);
    }
    cv_.notify_all();
  }
  bool reached() {
    std::lock_guard lock(mutex_);
    return completed_ >= recorded_;
  }
  void wait_for(std::uint64_t generation) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return completed_ >= generation; });
  }
  // The failure this event reports, once (empty if none).
  std::string take_error() {
    std::lock_guard lock(mutex_);
    return std::exchange(error_, {});
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t recorded_ = 0;
  std::uint64_t completed_ = 0;
  std::string error_;
  const int device_;
};

class SimStream {
 public:
  explicit SimStream(int device) : device_(device), thread_([this] { run(); }) {}
  int device() const { return device_; }
  ~SimStream() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // runs what is queued first
  }
  void enqueue(std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_all();
  }
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  // A failure of queued work, held until an event or a stream synchronisation reports it.
  void set_fault(std::string what) {
    std::lock_guard lock(mutex_);
    fault_ = std::move(what);
  }
  std::string take_fault() {
    std::lock_guard lock(mutex_);
    return std::exchange(fault_, {});
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      work();
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> queue_;
  std::string fault_;
  bool busy_ = false;
  bool stop_ = false;
  const int device_;
  std::thread thread_;
};

// Set on a stream's thread while it runs a host function: CUDA forbids any CUDA call from one
// (it fails or deadlocks), and a simulation that allowed it would hide such a call until a GPU
// ran the code. A call from there ends the process, naming the call.
thread_local bool in_host_function = false;

// Elements as the kernels read and write them (device/convert_kernel.cu), on the host.
float load_element(DType dtype, const std::byte* base, std::size_t i) {
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, base + 4 * i, 4);
    return f;
  }
  std::uint16_t bits;
  std::memcpy(&bits, base + 2 * i, 2);
  return dtype == DType::kF16 ? element::f16_to_f32(bits) : element::bf16_to_f32(bits);
}

void store_element(DType dtype, std::byte* base, std::size_t i, float value) {
  if (dtype == DType::kF32) return void(std::memcpy(base + 4 * i, &value, 4));
  const std::uint16_t bits = dtype == DType::kF16 ? element::f32_to_f16(value) : element::f32_to_bf16(value);
  std::memcpy(base + 2 * i, &bits, 2);
}

bool float_element(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16; }

void not_from_a_host_function(const char* call) {
  if (!in_host_function) return;
  std::fprintf(stderr, "simulated device: %s called from a host function, which CUDA forbids\n", call);
  std::abort();
}

class SimulatedRuntime final : public DeviceRuntime, public SimulatedFaults {
 public:
  explicit SimulatedRuntime(int devices) : devices_(devices) {
    if (const char* flip = std::getenv("MODELCAST_SIMULATED_FLIP_BYTE")) flip_at_ = std::strtoull(flip, nullptr, 10);
  }

  std::string name() const override { return "simulated"; }
  int device_count() const override { return devices_; }

  void* allocate(int device, std::size_t bytes) override {
    not_from_a_host_function("allocate");
    check_device(device);
    bool fail = false;
    {
      std::lock_guard lock(faults_mutex_);
      if (allocation_fault_ > 0 && --allocation_fault_ == 0) {
        fail = true;
        if (failing_allocations_ > 1) {
          --failing_allocations_;
          allocation_fault_ = 1;  // the next allocation fails too
        }
      }
    }
    if (fail) {
      throw Error(ErrorCode::kResource, "simulated device: cannot allocate " + std::to_string(bytes) +
                                            " bytes (injected fault)");
    }
    std::uint64_t token = next_token();
    int fd = memfd_create(memfd_name(token).c_str(), MFD_CLOEXEC);
    if (fd < 0) throw Error(ErrorCode::kResource, "simulated device: memfd_create: " + std::string(strerror(errno)));
    std::size_t length = std::max<std::size_t>(bytes, 1);
    if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
      close(fd);
      throw Error(ErrorCode::kResource, "simulated device: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    // Populated now, as cudaMalloc commits its memory: a first copy into it must not pay page faults.
    void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) {
      close(fd);
      throw Error(ErrorCode::kResource, "simulated device: cannot map " + std::to_string(bytes) + " bytes");
    }
    std::lock_guard lock(mutex_);
    allocations_[reinterpret_cast<std::uintptr_t>(base)] = Allocation{fd, length, device, token, false, base};
    return base;
  }

  // cudaFree waits for the device: work queued on any stream may still use the memory.
  void release(void* pointer) noexcept override {
    not_from_a_host_function("release");
    drain_all();
    unmap(pointer, false);
  }

  PointerInfo pointer_info(const void* pointer) const override {
    not_from_a_host_function("pointer_info");
    std::lock_guard lock(mutex_);
    const Allocation* a = find(pointer);
    if (!a) return {};
    return {MemoryKind::kCuda, a->device, a->base, a->size};
  }

  void* allocate_host(std::size_t bytes) override {
    not_from_a_host_function("allocate_host");
    return ::operator new(std::max<std::size_t>(bytes, 1));
  }
  void release_host(void* pointer) noexcept override {
    not_from_a_host_function("release_host");
    ::operator delete(pointer);
  }

  // Host memory is all the simulated device copies from; pinning only checks the range is host.
  void pin_host(void* pointer, std::size_t bytes) override {
    not_from_a_host_function("pin_host");
    std::lock_guard lock(mutex_);
    if (find(pointer) || (bytes && find(static_cast<std::byte*>(pointer) + bytes - 1))) {
      throw Error(ErrorCode::kInvalidArgument, "simulated device: pin_host of device memory");
    }
  }
  void unpin_host(void*) noexcept override {
    not_from_a_host_function("unpin_host");
  }

  StreamHandle create_stream(int device) override {
    not_from_a_host_function("create_stream");
    check_device(device);
    auto* stream = new SimStream(device);
    std::lock_guard lock(streams_mutex_);
    streams_.insert(stream);
    return stream;
  }
  void destroy_stream(StreamHandle stream) noexcept override {
    not_from_a_host_function("destroy_stream");
    {
      std::lock_guard lock(streams_mutex_);
      streams_.erase(static_cast<SimStream*>(stream));
    }
    delete static_cast<SimStream*>(stream);
  }
  // The handle owns a reference: work queued on a stream keeps the event alive after
  // destroy_event, as CUDA defers the destruction of an event with work pending on it.
  EventHandle create_event(int device) override {
    not_from_a_host_function("create_event");
    check_device(device);
    return new std::shared_ptr<SimEvent>(std::make_shared<SimEvent>(device));
  }
  void destroy_event(EventHandle event) noexcept override {
    not_from_a_host_function("destroy_event");
    delete static_cast<std::shared_ptr<SimEvent>*>(event);
  }

  void copy_async(void* destination, const void* source, std::size_t n, StreamHandle stream) override {
    not_from_a_host_function("copy_async");
    check_extent("copy destination", destination, n);
    check_extent("copy source", source, n);
    if (auto fault = take_copy_fault(destination, source); fault && fault->fail) {
      std::string what = "simulated device: a copy of " + std::to_string(n) +
                         " bytes from device memory to the host failed (injected fault)";
      if (!stream) {
        fault->release.wait();
        throw Error(ErrorCode::kTransport, what);
      }
      auto* s = static_cast<SimStream*>(stream);
      return s->enqueue([s, release = fault->release, what] {
        release.wait();
        s->set_fault(what);
      });
    } else if (fault) {
      // Held, then copied below.
      submit(stream, [release = fault->release, reached = fault->reached] {
        reached->set_value();
        release.wait();
      });
    }
    const bool to_device = is_device(destination);
    auto* landed = to_device && !is_device(source) ? &host_to_device_bytes_ : nullptr;
    std::byte* flip = nullptr;
    if (flip_at_ && to_device) {
      // Counted in queue order, which for one stream is the order the copies land in.
      std::uint64_t before = copied_to_device_.fetch_add(n);
      if (*flip_at_ >= before && *flip_at_ < before + n) flip = static_cast<std::byte*>(destination) + (*flip_at_ - before);
    }
    submit(stream, [=] {
      std::memcpy(destination, source, n);
      if (flip) *flip ^= std::byte{0x01};
      if (landed) landed->fetch_add(n);
    });
  }

  void record(EventHandle event, StreamHandle stream) override {
    not_from_a_host_function("record");
    auto e = state(event);
    auto* s = static_cast<SimStream*>(stream);
    // cudaEventRecord refuses an event and a stream of different devices.
    if (s && s->device() != e->device()) {
      throw Error(ErrorCode::kInvalidArgument, "simulated device: an event of device " + std::to_string(e->device()) +
                                                   " recorded on a stream of device " + std::to_string(s->device()));
    }
    std::uint64_t generation = e->arm();
    submit(stream, [e, generation, s] { e->complete(generation, s ? s->take_fault() : std::string()); });
  }

  void wait(StreamHandle stream, EventHandle event) override {
    not_from_a_host_function("wait");
    auto e = state(event);
    std::uint64_t generation = e->armed();
    submit(stream, [e, generation] { e->wait_for(generation); });
  }

  void synchronize(EventHandle event) override {
    not_from_a_host_function("synchronize");
    auto e = state(event);
    e->wait_for(e->armed());
    if (auto error = e->take_error(); !error.empty()) throw Error(ErrorCode::kTransport, error);
  }

  // Like cudaEventQuery, reports a failure of the work before the event.
  bool ready(EventHandle event) override {
    not_from_a_host_function("ready");
    auto e = state(event);
    if (!e->reached()) return false;
    if (auto error = e->take_error(); !error.empty()) throw Error(ErrorCode::kTransport, error);
    return true;
  }

  void host_function(StreamHandle stream, std::function<void()> function) override {
    not_from_a_host_function("host_function");
    submit(stream, [function = std::move(function)] {
      struct Flag {
        Flag() { in_host_function = true; }
        ~Flag() { in_host_function = false; }
      } flag;
      function();
    });
  }

  void synchronize_stream(StreamHandle stream) override {
    not_from_a_host_function("synchronize_stream");
    if (!stream) return;
    auto* s = static_cast<SimStream*>(stream);
    s->drain();
    if (auto error = s->take_fault(); !error.empty()) throw Error(ErrorCode::kTransport, error);
  }

  std::vector<std::uint64_t> digest(int device, const void* base, std::span<const ByteRange> ranges,
                                    StreamHandle stream) override {
    not_from_a_host_function("digest");
    check_device(device);
    for (const auto& r : ranges) check_extent("digest range", static_cast<const std::byte*>(base) + r.offset, r.size);
    std::vector<std::uint64_t> digests(ranges.size());
    // A kernel launch on a stream of another device than the current one fails in CUDA.
    if (stream && static_cast<SimStream*>(stream)->device() != device) {
      throw Error(ErrorCode::kInvalidArgument, "simulated device: a digest on device " + std::to_string(device) +
                                                   " queued on a stream of device " +
                                                   std::to_string(static_cast<SimStream*>(stream)->device()));
    }
    std::vector<ByteRange> copy(ranges.begin(), ranges.end());
    SimEvent done(device);
    std::uint64_t generation = done.arm();
    submit(stream, [&, generation] {
      for (std::size_t i = 0; i < copy.size(); ++i) {
        digests[i] = pmix64::digest_host(static_cast<const std::byte*>(base) + copy[i].offset, copy[i].size);
      }
      done.complete(generation);
    });
    done.wait_for(generation);
    return digests;
  }

  void gather_async(void* destination, const void* source, std::span<const ByteRun> runs,
                    StreamHandle stream) override {
    not_from_a_host_function("gather_async");
    for (const auto& r : runs) {
      check_on_device("gather destination", static_cast<std::byte*>(destination) + r.dst_offset, r.bytes);
      check_on_device("gather source", static_cast<const std::byte*>(source) + r.src_offset, r.bytes);
    }
    submit(stream, [destination, source, runs = std::vector<ByteRun>(runs.begin(), runs.end())] {
      for (const auto& r : runs) {
        std::memcpy(static_cast<std::byte*>(destination) + r.dst_offset,
                    static_cast<const std::byte*>(source) + r.src_offset, r.bytes);
      }
    });
  }

  void convert_async(void* destination, DType to, const void* source, DType from, std::size_t count,
                     StreamHandle stream) override {
    not_from_a_host_function("convert_async");
    if (!float_element(to) || !float_element(from)) {
      throw Error(ErrorCode::kInvalidArgument, "simulated device: conversions are between f32, f16 and bf16");
    }
    check_on_device("conversion destination", destination, count * dtype_size(to));
    check_on_device("conversion source", source, count * dtype_size(from));
    submit(stream, [=] {
      if (to == from) return void(std::memcpy(destination, source, count * dtype_size(to)));  // as the host
      auto* out = static_cast<std::byte*>(destination);
      const auto* in = static_cast<const std::byte*>(source);
      for (std::size_t i = 0; i < count; ++i) store_element(to, out, i, load_element(from, in, i));
    });
  }

  std::vector<float> quantize_fp8(void* destination, const void* source, DType from, std::size_t count,
                                  std::size_t block, StreamHandle stream) override {
    not_from_a_host_function("quantize_fp8");
    if (!float_element(from)) {
      throw Error(ErrorCode::kInvalidArgument, "simulated device: fp8 quantizes f32, f16 or bf16");
    }
    check_on_device("quantization destination", destination, count);
    check_on_device("quantization source", source, count * dtype_size(from));
    const std::size_t per = block == 0 ? std::max<std::size_t>(count, 1) : block;
    std::vector<float> scales(count == 0 ? 1 : count / per + (count % per != 0), 1.0f);
    SimEvent done(stream ? static_cast<SimStream*>(stream)->device() : 0);
    const std::uint64_t generation = done.arm();
    submit(stream, [&, generation] {
      auto* out = static_cast<std::uint8_t*>(destination);
      const auto* in = static_cast<const std::byte*>(source);
      for (std::size_t b = 0; b * per < count; ++b) {
        const std::size_t end = std::min(count, (b + 1) * per);
        float amax = 0.0f;
        for (std::size_t i = b * per; i < end; ++i) amax = std::max(amax, element::finite_magnitude(load_element(from, in, i)));
        scales[b] = element::fp8_scale(amax);
        for (std::size_t i = b * per; i < end; ++i) out[i] = element::f8e4m3_quantize(load_element(from, in, i), scales[b]);
      }
      done.complete(generation);
    });
    done.wait_for(generation);
    return scales;
  }

  IpcHandle export_allocation(const void* base) override {
    not_from_a_host_function("export_allocation");
    std::lock_guard lock(mutex_);
    auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == allocations_.end() || it->second.imported) {
      throw Error(ErrorCode::kInvalidArgument,
                  "simulated device: IPC export needs the base of an allocation of this process");
    }
    it->second.exported = true;
    SimHandle h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.pid = getpid();
    h.fd = it->second.fd;
    h.size = it->second.size;
    h.token = it->second.token;
    h.device = it->second.device;
    IpcHandle handle{};
    std::memcpy(handle.data(), &h, sizeof h);
    return handle;
  }

  void* open_ipc(const IpcHandle& handle, int device) override {
    not_from_a_host_function("open_ipc");
    check_device(device);
    SimHandle h;
    std::memcpy(&h, handle.data(), sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
      throw Error(ErrorCode::kTransport, "simulated device: not an IPC handle of the simulated device");
    }
    if (h.pid == getpid()) {
      // CUDA refuses this too (cudaErrorDeviceUninitialized): IPC is between processes.
      throw Error(ErrorCode::kTransport, "simulated device: cannot open an IPC handle exported by this process");
    }
    std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
    char target[256] = {};
    ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0 || std::string(target).find(memfd_name(h.token)) == std::string::npos) {
      throw Error(ErrorCode::kTransport, "simulated device: the exporting allocation is gone (" + path + ")");
    }
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw Error(ErrorCode::kTransport, "simulated device: cannot open " + path + ": " + strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < h.size) {
      close(fd);
      throw Error(ErrorCode::kTransport, "simulated device: IPC handle larger than its allocation");
    }
    void* base = mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) throw Error(ErrorCode::kTransport, "simulated device: cannot map an IPC handle");
    std::lock_guard lock(mutex_);
    allocations_[reinterpret_cast<std::uintptr_t>(base)] = Allocation{-1, h.size, device, h.token, true, base};
    return base;
  }

  void close_ipc(void* base) noexcept override {
    not_from_a_host_function("close_ipc");
    drain_all();
    unmap(base, true);
  }

  void fail_copy_to_host(std::uint64_t nth, std::shared_future<void> release) override {
    arm_copy_to_host(nth, std::move(release), true);
  }
  std::shared_future<void> hold_copy_to_host(std::uint64_t nth, std::shared_future<void> release) override {
    return arm_copy_to_host(nth, std::move(release), false);
  }
  std::shared_future<void> hold_copy_from_peer(std::uint64_t nth, std::shared_future<void> release) override {
    return arm_copy(nth, std::move(release), false, CopyKind::kFromPeer);
  }
  void fail_allocation(std::uint64_t nth, std::uint64_t count) override {
    if (nth == 0 || count == 0) {
      throw Error(ErrorCode::kInvalidArgument, "simulated device: fail_allocation(" + std::to_string(nth) + ", " +
                                                   std::to_string(count) + "): both count from 1");
    }
    std::lock_guard lock(faults_mutex_);
    failing_allocations_ = count;
    allocation_fault_ = nth;
  }
  void disarm() override {
    std::lock_guard lock(faults_mutex_);
    allocation_fault_ = 0;
    failing_allocations_ = 0;
    copy_fault_.reset();
  }
  std::uint64_t copied_host_to_device() const override { return host_to_device_bytes_.load(); }
  std::size_t open_ipc_mappings() const override {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [base, allocation] : allocations_) n += allocation.imported ? 1 : 0;
    return n;
  }

 private:
  struct Allocation {
    int fd = -1;  // -1 for an imported mapping
    std::size_t size = 0;
    int device = 0;
    std::uint64_t token = 0;
    bool imported = false;
    const void* base = nullptr;
    bool exported = false;  // export_allocation was called: other processes may map it
  };

  void check_device(int device) const {
    if (device < 0 || device >= devices_) {
      throw Error(ErrorCode::kInvalidArgument, "simulated device: no device " + std::to_string(device) + " (there are " +
                                                   std::to_string(devices_) + ")");
    }
  }

  // A range must not straddle the end of a device allocation: a copy past it would fault on a GPU.
  void check_extent(const char* what, const void* pointer, std::size_t n) const {
    std::lock_guard lock(mutex_);
    const Allocation* a = find(pointer);
    if (!a) return;
    auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(pointer) - static_cast<const std::byte*>(a->base));
    if (n > a->size - offset) {
      throw Error(ErrorCode::kInvalidArgument, std::string("simulated device: ") + what + " of " + std::to_string(n) +
                                                   " bytes runs past the end of its device allocation");
    }
  }

  // Kernels read and write device memory only (a host pointer would fault on a GPU).
  void check_on_device(const char* what, const void* pointer, std::size_t n) const {
    if (n == 0) return;
    if (!is_device(pointer)) {
      throw Error(ErrorCode::kInvalidArgument, std::string("simulated device: the ") + what + " is not device memory");
    }
    check_extent(what, pointer, n);
  }

  bool is_device(const void* pointer) const {
    std::lock_guard lock(mutex_);
    return find(pointer) != nullptr;
  }
  // In another process's allocation, mapped here (open_ipc).
  bool is_imported(const void* pointer) const {
    std::lock_guard lock(mutex_);
    const Allocation* a = find(pointer);
    return a != nullptr && a->imported;
  }

  const Allocation* find(const void* pointer) const {
    auto address = reinterpret_cast<std::uintptr_t>(pointer);
    auto it = allocations_.upper_bound(address);
    if (it == allocations_.begin()) return nullptr;
    --it;
    if (address >= it->first + it->second.size) return nullptr;
    return &it->second;
  }

  void unmap(void* pointer, bool imported) noexcept {
    Allocation a;
    {
      std::lock_guard lock(mutex_);
      auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(pointer));
      if (it == allocations_.end() || it->second.imported != imported) return;
      a = it->second;
      allocations_.erase(it);
    }
    // A mapping another process opened keeps these pages; on a GPU the freed memory is reused at
    // once, so what that process reads afterwards is not what was exported: poisoned here, so a
    // peer that reads after the free sees bytes that fail their digests, as it would on a GPU.
    if (a.exported) std::memset(pointer, 0xdb, a.size);
    munmap(pointer, a.size);
    if (a.fd >= 0) close(a.fd);
  }

  enum class CopyKind { kToHost, kFromPeer };

  // Each returns when the stream reaches the faulty copy.
  std::shared_future<void> arm_copy_to_host(std::uint64_t nth, std::shared_future<void> release, bool fail) {
    return arm_copy(nth, std::move(release), fail, CopyKind::kToHost);
  }

  std::shared_future<void> arm_copy(std::uint64_t nth, std::shared_future<void> release, bool fail, CopyKind kind) {
    if (nth == 0) throw Error(ErrorCode::kInvalidArgument, "simulated device: the faulty copy counts from 1");
    if (!release.valid()) throw Error(ErrorCode::kInvalidArgument, "simulated device: a held copy needs a release");
    auto reached = std::make_shared<std::promise<void>>();
    auto when = reached->get_future().share();
    std::lock_guard lock(faults_mutex_);
    copy_fault_ = CopyFault{nth, std::move(release), fail, std::move(reached), kind};
    return when;
  }

  struct CopyFault {
    std::uint64_t countdown = 0;  // copies to the host until the faulty one
    std::shared_future<void> release;
    bool fail = true;  // false: held until the release, then copied
    std::shared_ptr<std::promise<void>> reached;  // set when a held copy starts to wait
    CopyKind kind = CopyKind::kToHost;  // which copies count toward it
  };

  // The armed fault when this copy is the one it names (it is disarmed then).
  std::optional<CopyFault> take_copy_fault(const void* destination, const void* source) {
    {
      std::lock_guard lock(faults_mutex_);
      if (!copy_fault_) return std::nullopt;
    }
    const bool to_host = is_device(source) && !is_device(destination);
    const bool from_peer = is_imported(source);
    std::lock_guard lock(faults_mutex_);
    if (!copy_fault_) return std::nullopt;
    if (!(copy_fault_->kind == CopyKind::kToHost ? to_host : from_peer)) return std::nullopt;
    if (--copy_fault_->countdown != 0) return std::nullopt;
    auto fault = std::move(*copy_fault_);
    copy_fault_.reset();
    return fault;
  }

  static std::shared_ptr<SimEvent> state(EventHandle event) { return *static_cast<std::shared_ptr<SimEvent>*>(event); }

  void drain_all() noexcept {
    std::lock_guard lock(streams_mutex_);
    for (auto* stream : streams_) stream->drain();
  }

  // The legacy default stream (nullptr) runs work on the caller's thread: it is synchronous.
  static void submit(StreamHandle stream, std::function<void()> work) {
    if (!stream) return work();
    static_cast<SimStream*>(stream)->enqueue(std::move(work));
  }

  std::uint64_t next_token() {
    std::lock_guard lock(mutex_);
    if (token_seed_ == 0) token_seed_ = std::random_device{}() | 1;
    return (token_seed_ << 20) + ++tokens_;
  }

  const int devices_;
  // A fault for the integrity tests, which only a simulation can inject on demand: with
  // MODELCAST_SIMULATED_FLIP_BYTE=N, one bit of the Nth byte (from 0, counted over every byte
  // this process copies into device memory) is flipped as it lands, as a bad link or a stray
  // write would do.
  std::optional<std::uint64_t> flip_at_;
  std::atomic<std::uint64_t> copied_to_device_{0};
  std::atomic<std::uint64_t> host_to_device_bytes_{0};  // completed host-to-device copies
  std::mutex faults_mutex_;                   // not held with mutex_
  std::optional<CopyFault> copy_fault_;  // guarded by faults_mutex_
  std::uint64_t allocation_fault_ = 0;     // allocations until the injected failure (0: none); faults_mutex_
  std::uint64_t failing_allocations_ = 0;  // how many fail from there; faults_mutex_
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Allocation> allocations_;  // guarded by mutex_
  std::uint64_t token_seed_ = 0, tokens_ = 0;         // guarded by mutex_
  std::mutex streams_mutex_;                          // not held with mutex_
  std::set<SimStream*> streams_;                      // guarded by streams_mutex_: live streams
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_simulated_runtime(int devices) {
  return std::make_unique<SimulatedRuntime>(devices);
}

SimulatedFaults* simulated_faults(DeviceRuntime& runtime) { return dynamic_cast<SimulatedRuntime*>(&runtime); }

}  // namespace modelcast::device
