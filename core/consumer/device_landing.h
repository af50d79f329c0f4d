// A device consumer's last stage: a version that arrives in a host receive buffer is copied to
// one of the consumer's device buffers while it arrives (each chunk as soon as the contiguous
// prefix reaches it), and with pmix64 digests (a device producer's) hashed there once all of it
// is in, so the check covers the bytes readers will use. A host producer's versions were checked
// block by block in the host buffer; their copy here is not hashed again (README, device paths).
// Versions are installed only after this.
//
// Threads: the consumer's service thread only. The stream is this object's; device buffers are
// shared with installed versions, and one is reused only when no view holds it. A landing in
// progress holds its buffer (so it is not available to another) until complete() or abandon().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "device/device_runtime.h"
#include "core/model/installed_version.h"
#include "core/model/manifest.h"

namespace modelcast::consumer {

class DeviceLanding {
 public:
  struct Landed {
    std::shared_ptr<detail::DeviceBuffer> buffer;
    std::vector<std::uint64_t> digests;  // pmix64 of each tensor's device copy, when asked
  };

  // Up to `buffers` device buffers on `device`, allocated when first needed.
  DeviceLanding(device::DeviceRuntime& runtime, int device, std::size_t buffers);
  ~DeviceLanding();  // waits for its stream; buffers held by views stay valid
  DeviceLanding(const DeviceLanding&) = delete;
  DeviceLanding& operator=(const DeviceLanding&) = delete;

  bool available() const;  // begin() would find a buffer no view holds
  // As VersionStore::set_buffer_count: none allocated past `buffers` from now on.
  void set_buffer_count(std::size_t buffers) { buffers_ = buffers; }

  // Starts landing `total_bytes` that will arrive in `host`: takes a free device buffer
  // (reallocated if too small) and pins `host` the first time it is seen. A landing still in
  // progress is abandoned first. `host` must outlive complete() or abandon(). Throws
  // Error(kState) when every buffer is held, kResource or kTransport for a device failure
  // (the pool is then as it was).
  void begin(std::uint64_t total_bytes, detail::ReceiveBuffer& host);
  bool landing() const { return current_.has_value(); }
  // The first `received` bytes of the host buffer are final: queues their copy to the device
  // (what was queued before is not copied again). Never waits for the copy.
  void advance(std::uint64_t received);
  // Copies what is left, waits for every copy and, with `digest`, hashes each of the
  // manifest's tensors on the device. Ends the landing; its buffer is the caller's to install.
  Landed complete(const Manifest& manifest, bool digest);
  // Ends a landing without a result, once its copies have finished (its host buffer may then
  // be reused); the device buffer goes back to the pool. No-op without one.
  void abandon() noexcept;

  // begin(), then complete(): the whole version at once.
  Landed land(const Manifest& manifest, detail::ReceiveBuffer& host, bool digest);

  // pmix64 digests of the manifest's tensors in device memory at `base` (a version a one-sided
  // route read straight into a device buffer).
  std::vector<std::uint64_t> digest(const Manifest& manifest, const std::byte* base);

  int device() const { return device_; }
  // The stream the copies and digests are queued on (to order other work after them).
  device::StreamHandle stream() const { return stream_; }

 private:
  struct Current {
    std::shared_ptr<detail::DeviceBuffer> buffer;
    const std::byte* host = nullptr;
    std::uint64_t total = 0;
    std::uint64_t queued = 0;  // bytes [0, queued) have their copy queued on stream_
  };

  device::DeviceRuntime& runtime_;
  const int device_;
  std::size_t buffers_;
  device::StreamHandle stream_ = nullptr;
  std::vector<std::shared_ptr<detail::DeviceBuffer>> pool_;
  std::optional<Current> current_;
};

}  // namespace modelcast::consumer
