// A device consumer's last stage: a version that arrived in a host receive buffer is copied to
// one of the consumer's device buffers, and with pmix64 digests (a device producer's) hashed
// there, so the check covers the bytes readers will use. Versions are installed only after this.
//
// Threads: the consumer's service thread only. The stream is this object's; device buffers are
// shared with installed versions, and one is reused only when no view holds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device/device_runtime.h"
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

  bool available() const;  // land() would find a buffer no view holds
  // Copies manifest.total_bytes from `host` into a free device buffer (reallocated if too
  // small) and, with `digest`, hashes each tensor there. Pins `host` the first time it is seen. Throws Error(kState) when every
  // buffer is held, kResource or kTransport for a device failure.
  Landed land(const Manifest& manifest, detail::ReceiveBuffer& host, bool digest);

  // pmix64 digests of the manifest's tensors in device memory at `base` (a version a one-sided
  // route read straight into a device buffer).
  std::vector<std::uint64_t> digest(const Manifest& manifest, const std::byte* base);

  int device() const { return device_; }

 private:
  device::DeviceRuntime& runtime_;
  const int device_;
  const std::size_t buffers_;
  device::StreamHandle stream_ = nullptr;
  std::vector<std::shared_ptr<detail::DeviceBuffer>> pool_;
};

}  // namespace modelcast::consumer
