#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <type_traits>

#include "device/device_runtime.h"
#include "modelcast/error.h"
#include "transports/cuda_ipc/ipc_descriptor.h"
#include "transports/cuda_ipc/ipc_handle_cache.h"

namespace modelcast::transport {
namespace {

static_assert(std::is_same_v<decltype(cuda_ipc::IpcExport::handle), device::IpcHandle>,
              "the descriptor carries the device runtime's IPC handle as it is");

class IpcRegion final : public MemoryRegion {
 public:
  IpcRegion(std::byte* base, std::size_t length, MemoryLocation location, std::uint32_t slot)
      : base_(base), length_(length), location_(location), slot_(slot) {}
  std::byte* base() const override { return base_; }
  std::size_t length() const override { return length_; }
  MemoryLocation location() const override { return location_; }
  std::uint32_t slot() const { return slot_; }

 private:
  std::byte* base_;
  std::size_t length_;
  MemoryLocation location_;
  std::uint32_t slot_;
};

// A validated descriptor; mapped on the first read, on the reading side's device.
class IpcRemoteRegion final : public RemoteRegion {
 public:
  IpcRemoteRegion(PeerId peer, std::uint64_t exporter, cuda_ipc::IpcExport source)
      : peer_(peer), exporter_(exporter), source_(source) {}
  PeerId peer() const override { return peer_; }
  std::size_t length() const override { return source_.size; }
  std::uint64_t exporter() const { return exporter_; }
  const cuda_ipc::IpcExport& source() const { return source_; }

 private:
  PeerId peer_;
  std::uint64_t exporter_;
  cuda_ipc::IpcExport source_;
};

class CudaIpcTransport final : public Transport {
 public:
  explicit CudaIpcTransport(device::DeviceRuntime& runtime)
      : runtime_(runtime),
        exporter_((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {}

  ~CudaIpcTransport() override {
    std::map<int, Reader> readers;
    {
      std::lock_guard lock(mutex_);
      readers.swap(readers_);
    }
    for (auto& [device, reader] : readers) runtime_.destroy_stream(reader.stream);  // waits for reads
    in_flight_.clear();  // every read is done: the mappings close on this thread
  }

  std::string name() const override { return "cuda_ipc"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.pairs = {{MemoryKind::kCuda, MemoryKind::kCuda}, {MemoryKind::kCuda, MemoryKind::kHost}};
    c.reach = Reach::kHost;
    c.two_sided = false;
    c.one_sided = true;
    return c;
  }

  std::unique_ptr<MemoryRegion> register_memory(void* base, std::size_t length, MemoryLocation location) override {
    std::lock_guard lock(mutex_);
    return std::make_unique<IpcRegion>(static_cast<std::byte*>(base), length, location, next_slot_++);
  }

  std::vector<std::byte> address() const override { return {}; }
  PeerId connect(std::span<const std::byte>, bool, PeerFailure) override {
    std::lock_guard lock(mutex_);
    return ++next_peer_;
  }
  void disconnect(PeerId) override {}

  TransferId post_send(PeerId, const MemoryRegion&, std::size_t, std::size_t, std::uint64_t, Completion) override {
    throw Error(ErrorCode::kTransport, "cuda_ipc is one-sided: a consumer reads exported slots, nothing is sent");
  }
  TransferId post_recv(const MemoryRegion&, std::size_t, std::size_t, std::uint64_t, Completion) override {
    throw Error(ErrorCode::kTransport, "cuda_ipc is one-sided: a consumer reads exported slots, nothing is received");
  }

  std::vector<std::byte> export_region(const MemoryRegion& region) override {
    const auto& r = dynamic_cast<const IpcRegion&>(region);
    if (r.location().kind != MemoryKind::kCuda) {
      throw Error(ErrorCode::kTransport, "cuda_ipc exports device memory only");
    }
    cuda_ipc::IpcDescriptor d;
    d.exporter = exporter_;
    d.source.slot = r.slot();
    d.source.device = r.location().device;
    d.source.size = r.length();
    d.source.handle = runtime_.export_allocation(r.base());
    return cuda_ipc::encode_descriptor(d);
  }

  std::unique_ptr<RemoteRegion> import_region(PeerId peer, std::span<const std::byte> descriptor) override {
    auto d = cuda_ipc::decode_descriptor(descriptor);
    return std::make_unique<IpcRemoteRegion>(peer, d.exporter, d.source);
  }

  TransferId post_read(const RemoteRegion& source, std::size_t source_offset, const MemoryRegion& destination,
                       std::size_t destination_offset, std::size_t length, Completion done) override {
    const auto& remote = dynamic_cast<const IpcRemoteRegion&>(source);
    check_range("cuda_ipc read source", source_offset, length, remote.length());
    check_range("cuda_ipc read destination", destination_offset, length, destination.length());
    int device = destination.location().kind == MemoryKind::kCuda ? destination.location().device : 0;
    release_finished();
    Reader& reader = reader_for(device);
    auto mapping = reader.mappings->acquire(remote.exporter(), remote.source());
    const auto* from = static_cast<const std::byte*>(mapping->base) + source_offset;
    runtime_.copy_async(destination.base() + destination_offset, from, length, reader.stream);
    TransferId id;
    {
      // The mapping stays open until the copy is done, even if the cache drops it meanwhile. It
      // is let go here, never in the completion: closing it there would call CUDA from a host
      // function, which CUDA forbids.
      std::lock_guard lock(mutex_);
      id = ++next_transfer_;
      in_flight_.emplace(id, std::move(mapping));
    }
    // Listed as finished before the caller hears of it, so that a caller done with the source
    // (forget_import) finds every read of it let go.
    runtime_.host_function(reader.stream, [this, id, done = std::move(done)] {
      {
        std::lock_guard lock(mutex_);
        finished_.push_back(id);
      }
      done({true, {}});
    });
    return id;
  }

  void cancel(TransferId) override {}  // a queued device copy runs to its end; it never waits on a peer

  // The mapping closes here if every read of it has completed (their mappings are let go first),
  // else once the last one has, at a later call (release_finished).
  void forget_import(const RemoteRegion& source) override {
    const auto& remote = dynamic_cast<const IpcRemoteRegion&>(source);
    release_finished();
    std::vector<cuda_ipc::IpcHandleCache*> caches;
    {
      std::lock_guard lock(mutex_);
      for (auto& [device, reader] : readers_) caches.push_back(reader.mappings.get());
    }
    for (auto* cache : caches) cache->forget(remote.exporter(), remote.source().slot);
  }

 private:
  // Per device that reads: a stream, and the mappings opened there (a mapping belongs to the
  // device it was opened on; reading into device N maps onto device N).
  struct Reader {
    void* stream = nullptr;
    std::unique_ptr<cuda_ipc::IpcHandleCache> mappings;
  };

  // Mappings of reads that completed: dropped on a caller's thread (see post_read).
  void release_finished() {
    std::vector<std::shared_ptr<const cuda_ipc::Mapping>> done;
    {
      std::lock_guard lock(mutex_);
      for (auto id : finished_) {
        if (auto it = in_flight_.find(id); it != in_flight_.end()) {
          done.push_back(std::move(it->second));
          in_flight_.erase(it);
        }
      }
      finished_.clear();
    }
  }  // `done` goes here, outside the lock: a close may take milliseconds

  Reader& reader_for(int device) {
    std::lock_guard lock(mutex_);
    auto it = readers_.find(device);
    if (it != readers_.end()) return it->second;
    cuda_ipc::IpcOps ops;
    ops.open = [this, device](const cuda_ipc::IpcExport& source) {
      device::IpcHandle handle = source.handle;
      return runtime_.open_ipc(handle, device);
    };
    ops.close = [this](void* base, const cuda_ipc::IpcExport&) { runtime_.close_ipc(base); };
    Reader reader{runtime_.create_stream(device), std::make_unique<cuda_ipc::IpcHandleCache>(std::move(ops))};
    return readers_.emplace(device, std::move(reader)).first->second;
  }

  device::DeviceRuntime& runtime_;
  const std::uint64_t exporter_;
  std::mutex mutex_;
  std::map<int, Reader> readers_;  // guarded by mutex_; a Reader, once made, lives as long
  std::map<TransferId, std::shared_ptr<const cuda_ipc::Mapping>> in_flight_;  // guarded by mutex_
  std::vector<TransferId> finished_;  // guarded by mutex_: completed, mapping not yet let go
  std::uint32_t next_slot_ = 0;   // guarded by mutex_
  PeerId next_peer_ = 0;          // guarded by mutex_
  TransferId next_transfer_ = 0;  // guarded by mutex_
};

}  // namespace

bool cuda_ipc_available() { return device::device_runtime() != nullptr; }

std::unique_ptr<Transport> make_cuda_ipc_transport() {
  return std::make_unique<CudaIpcTransport>(device::require_device_runtime("the cuda_ipc transport"));
}

}  // namespace modelcast::transport
